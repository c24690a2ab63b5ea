"""How far matched detections are from their ground-truth boxes: centre (along and across the sensor's line of
sight), height, size and yaw errors.

AP at IoU 0.7 falls when boxes are found but misplaced; these errors say which part of the box is off (a yaw
error of 10 degrees alone takes a car's BEV IoU to about 0.8). Boxes are LiDAR-frame ``(x, y, z, l, w, h, yaw)``
with ``l`` along the heading; yaw errors are wrapped to [-90, 90) degrees, since the IoU of a box does not change
when it is turned by 180 degrees.
"""
import numpy as np

ERROR_NAMES = ('radial', 'lateral', 'dz', 'dl', 'dw', 'dh', 'dyaw')  #: per matched pair, prediction - truth


def _boxes(name, value):
    boxes = np.asarray(value, dtype=np.float64)
    if boxes.size == 0:
        return boxes.reshape(0, 7)
    if boxes.ndim != 2 or boxes.shape[1] != 7:
        raise ValueError(f'localisation_errors: {name} must be an (N, 7) array, got shape {boxes.shape}')
    return boxes


def localisation_errors(pred_boxes, pred_scores, gt_boxes, max_distance=2.0, min_score=0.3):
    """Match detections to ground truth by BEV centre distance (best score first, each box once) and measure the
    matched pairs' errors.

    Args:
        pred_boxes (array): (M, 7) predicted boxes; pred_scores (array): (M,) their scores.
        gt_boxes (array): (G, 7) ground-truth boxes of the same class.
        max_distance (float): largest BEV centre distance of a match, metres.
        min_score (float): detections below it are left out.
    Returns:
        dict: name (:data:`ERROR_NAMES`) -> (K,) float array over the K matches: ``radial`` / ``lateral`` centre
        error along / across the direction from the sensor to the true centre (m), ``dz``, ``dl``, ``dw``, ``dh``
        (m) and ``dyaw`` (degrees); ``range`` (K,) the true centre's BEV distance from the sensor.
    Raises:
        ValueError: boxes not (N, 7), scores not one per predicted box, or a negative ``max_distance``.
    """
    pred, gt = (_boxes(name, value) for name, value in (('pred_boxes', pred_boxes), ('gt_boxes', gt_boxes)))
    scores = np.asarray(pred_scores, dtype=np.float64).reshape(-1)
    if scores.shape[0] != pred.shape[0]:
        raise ValueError(f'localisation_errors: pred_scores needs one score per predicted box ({pred.shape[0]}), '
                         f'got {scores.shape[0]}')
    if not max_distance >= 0:
        raise ValueError(f'localisation_errors: max_distance must be >= 0, got {max_distance!r}')
    pairs, used = [], set()
    for i in np.argsort(-scores, kind='stable'):
        if scores[i] < min_score or not len(gt):
            continue
        distance = np.linalg.norm(gt[:, :2] - pred[i, :2], axis=1)
        distance[list(used)] = np.inf
        j = int(np.argmin(distance))
        if distance[j] <= max_distance:
            used.add(j)
            pairs.append((i, j))
    p = pred[[i for i, _ in pairs]].reshape(-1, 7)
    g = gt[[j for _, j in pairs]].reshape(-1, 7)
    rng = np.linalg.norm(g[:, :2], axis=1)
    sight = g[:, :2] / np.maximum(rng, 1e-9)[:, None]
    offset = p[:, :2] - g[:, :2]
    dyaw = (p[:, 6] - g[:, 6] + np.pi / 2) % np.pi - np.pi / 2
    return dict(radial=(offset * sight).sum(1), lateral=offset[:, 1] * sight[:, 0] - offset[:, 0] * sight[:, 1],
                dz=p[:, 2] - g[:, 2], dl=p[:, 3] - g[:, 3], dw=p[:, 4] - g[:, 4], dh=p[:, 5] - g[:, 5],
                dyaw=np.degrees(dyaw), range=rng)


def summarise_errors(errors):
    """Per error of :func:`localisation_errors` (several frames' results concatenated): ``bias`` (median signed
    error) and ``median_abs``, plus ``matches``. NaN where there is no match."""
    summary = dict(matches=int(len(errors['dyaw'])))
    for name in ERROR_NAMES:
        values = np.asarray(errors[name], dtype=np.float64)
        summary[f'{name}_bias'] = float(np.median(values)) if len(values) else float('nan')
        summary[f'{name}_median_abs'] = float(np.median(np.abs(values))) if len(values) else float('nan')
    return summary


def concatenate_errors(per_frame):
    """The errors of several :func:`localisation_errors` results as one dict of arrays."""
    keys = ERROR_NAMES + ('range',)
    return {k: np.concatenate([e[k] for e in per_frame]) if per_frame else np.zeros(0) for k in keys}


__all__ = ['ERROR_NAMES', 'concatenate_errors', 'localisation_errors', 'summarise_errors']
