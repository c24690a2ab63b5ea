"""KITTI's own 3D / BEV scoring, made exact for small sets (interpolated R40).

The cleaning and matching follow KITTI's object devkit (facts in ``../shared/reference/data.md`` section 1.4):

* difficulty (:data:`DIFFICULTIES`): ground truth whose 2D box is lower than the minimum height, more occluded or
  more truncated than the level allows is *ignored*; so is ground truth of a neighbouring class
  (:data:`NEIGHBOURS`: Van for Car, Person_sitting for Pedestrian); other classes do not take part;
* a detection whose 2D box (its 3D box projected into the image) is lower than the minimum height is ignored (and,
  as in the devkit, such a low detection of another class takes part as an ignored one);
* ground truth is visited in label order; each takes, among the not yet assigned detections above the score
  threshold whose overlap *exceeds* the IoU threshold, the non-ignored one of greatest overlap (else the first
  ignored one); a match with ignored ground truth or an ignored detection is neither true nor false;
* every other kept detection is a false positive unless its 2D box lies in a DontCare region (intersection over
  the detection's own area above the IoU threshold).

Precision ``tp / (tp + fp)`` and recall ``tp / (tp + fn)`` are computed at every detection score as a threshold,
and AP is the mean over ``r = 1/40, ..., 40/40`` of the best precision at any recall >= r. The devkit samples
its thresholds one per 1/40 of recall instead, which cannot measure sets with fewer than ~40 objects (the ground
truth itself scores 7.5 on 4 cars there); on large sets the two agree.
"""
import numpy as np

from .ap import NUM_RECALL_POSITIONS, interpolated_precision

DIFFICULTIES = {'easy': (40.0, 0, 0.15), 'moderate': (25.0, 1, 0.30), 'hard': (25.0, 2, 0.50)}
NEIGHBOURS = {'Car': ('Van',), 'Pedestrian': ('Person_sitting',)}


def _height(bbox):
    bbox = np.asarray(bbox, dtype=np.float64).reshape(-1, 4)
    return np.abs(bbox[:, 3] - bbox[:, 1])


def clean_frame(gt_names, gt_bbox, gt_occluded, gt_truncated, det_bbox, det_is_class, class_name, difficulty):
    """Which ground truth and detections of one frame take part for a class at a difficulty (the devkit's rules).

    Ground truth of the class takes part, ignored when its 2D box is at most the minimum height high or it is more
    occluded or truncated than the level allows; so does a neighbouring class's, always ignored. Detections of the
    class take part, ignored when their 2D box (height truncated to whole pixels) is lower than the minimum; the
    devkit lets such low detections of *other* classes take part as ignored ones too.

    Args:
        gt_names (array): (G,) KITTI type of every labelled object (DontCare included).
        gt_bbox (array): (G, 4) image boxes; gt_occluded (G,), gt_truncated (G,).
        det_bbox (array): (D, 4) image boxes of the detections; det_is_class (D,) bool: detected as ``class_name``.
        class_name (str); difficulty (str): a key of :data:`DIFFICULTIES`.
    Returns:
        dict: ``gt_rows`` (G',) indices of the participating ground truth (label order), ``ignored_gt`` (G',) bool,
        ``det_rows`` (D',) indices of the participating detections, ``ignored_det`` (D',) bool, ``dontcare``
        (K, 4) image boxes.
    """
    if difficulty not in DIFFICULTIES:
        raise ValueError(f'difficulty must be one of {sorted(DIFFICULTIES)}, got {difficulty!r}')
    min_height, max_occlusion, max_truncation = DIFFICULTIES[difficulty]
    lower = np.char.lower(np.asarray(gt_names).astype(str))
    same = lower == class_name.lower()
    neighbour = np.isin(lower, [n.lower() for n in NEIGHBOURS.get(class_name, ())])
    outside = (np.asarray(gt_occluded) > max_occlusion) \
        | (np.asarray(gt_truncated, dtype=np.float64) > max_truncation) | (_height(gt_bbox) <= min_height)
    rows = np.flatnonzero(same | neighbour)
    low = np.floor(_height(det_bbox)) < min_height
    det_rows = np.flatnonzero(np.asarray(det_is_class, dtype=bool) | low)
    return dict(gt_rows=rows, ignored_gt=(neighbour | outside)[rows], det_rows=det_rows, ignored_det=low[det_rows],
                dontcare=np.asarray(gt_bbox, dtype=np.float64).reshape(-1, 4)[lower == 'dontcare'])


def dontcare_cover(det_bbox, dontcare):
    """(D,) largest share of each detection's own 2D area inside any DontCare box (0 without DontCare)."""
    det = np.asarray(det_bbox, dtype=np.float64).reshape(-1, 4)
    if len(det) == 0 or len(dontcare) == 0:
        return np.zeros(len(det))
    w = np.clip(np.minimum(det[:, None, 2], dontcare[None, :, 2]) - np.maximum(det[:, None, 0], dontcare[None, :, 0]),
                0, None)
    h = np.clip(np.minimum(det[:, None, 3], dontcare[None, :, 3]) - np.maximum(det[:, None, 1], dontcare[None, :, 1]),
                0, None)
    area = (det[:, 2] - det[:, 0]) * (det[:, 3] - det[:, 1])
    return ((w * h) / np.where(area > 0, area, np.inf)[:, None]).max(axis=1)


def _match(overlap, ious, kept, ignored_gt, ignored_det):
    """Devkit matching of one frame with the ``kept`` detections; returns (tp, fn, assigned (D,) bool)."""
    assigned = np.zeros(len(kept), dtype=bool)
    tp = fn = 0
    for i in range(overlap.shape[1]):
        cand = kept & ~assigned & overlap[:, i]
        good = cand & ~ignored_det
        if good.any():
            j = int(np.argmax(np.where(good, ious[:, i], -1.0)))
        elif cand.any():
            j = int(np.argmax(cand))
        else:
            fn += int(not ignored_gt[i])
            continue
        assigned[j] = True
        tp += int(not ignored_gt[i] and not ignored_det[j])
    return tp, fn, assigned


def frame_curve(ious, scores, iou_threshold, ignored_gt, ignored_det, dontcare_share):
    """(tp, fp, fn) of one frame at every score threshold its own detections define.

    Args:
        ious (array): (D, G') IoU of the class's detections with the participating ground truth.
        scores (array): (D,) detection scores; iou_threshold (float): a match needs IoU > it.
        ignored_gt (G',), ignored_det (D,) bool (:func:`clean_frame`); dontcare_share (D,) (:func:`dontcare_cover`).
    Returns:
        tuple: ``thresholds`` (T,) distinct scores, descending; ``stats`` (T, 3) int (tp, fp, fn) with the
        detections scoring >= each threshold kept; ``base`` (3,) the stats with none kept (0, 0, ground truth).
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    ignored_gt = np.asarray(ignored_gt, dtype=bool).reshape(-1)
    ignored_det = np.asarray(ignored_det, dtype=bool).reshape(-1)
    ious = np.asarray(ious, dtype=np.float64).reshape(len(scores), len(ignored_gt))
    overlap = ious > iou_threshold
    in_dontcare = np.asarray(dontcare_share, dtype=np.float64).reshape(-1) > iou_threshold
    thresholds = np.unique(scores)[::-1]
    stats = np.zeros((len(thresholds), 3), dtype=np.int64)
    touches = overlap.any(axis=1)  # only these can change the matching when they join the kept set
    assigned = np.zeros(len(scores), dtype=bool)
    tp, fn = 0, int((~ignored_gt).sum())
    for t, threshold in enumerate(thresholds):
        kept = scores >= threshold
        if ((scores == threshold) & touches).any():
            tp, fn, assigned = _match(overlap, ious, kept, ignored_gt, ignored_det)
        fp = int((kept & ~assigned & ~ignored_det & ~in_dontcare).sum())
        stats[t] = (tp, fp, fn)
    return thresholds, stats, np.array([0, 0, int((~ignored_gt).sum())], dtype=np.int64)


def pooled_curve(curves):
    """Pool frames' curves at every threshold any of them defines.

    Args:
        curves (list): ``(thresholds, stats, base)`` per frame (:func:`frame_curve`).
    Returns:
        tuple: ``thresholds`` (T,) descending and ``tp``, ``fp``, ``fn`` (T,) summed over the frames, each frame
        at its detections scoring >= the threshold; ``num_gt`` the non-ignored ground truth of all frames.
    """
    num_gt = int(sum(base[2] for _, _, base in curves))
    times = [c[0] for c in curves if len(c[0])]
    if not times:
        return np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), num_gt
    deltas = [np.diff(np.concatenate([base[None], stats]), axis=0) for thr, stats, base in curves if len(thr)]
    t, d = np.concatenate(times), np.concatenate(deltas)
    order = np.argsort(-t, kind='stable')
    t, cum = t[order], np.cumsum(d[order], axis=0)
    last = np.r_[t[1:] != t[:-1], True]  # the last event of each distinct threshold holds its totals
    cum, t = cum[last], t[last]
    return t, cum[:, 0], cum[:, 1], num_gt + cum[:, 2], num_gt


def interpolated_ap(tp, fp, fn, num_positions=NUM_RECALL_POSITIONS):
    """Mean over r = 1/n..1 of the best precision at any threshold with recall >= r (0 where none reaches r)."""
    tp, fp, fn = (np.asarray(v, dtype=np.float64) for v in (tp, fp, fn))
    with np.errstate(divide='ignore', invalid='ignore'):
        precision = np.where(tp + fp > 0, tp / (tp + fp), 0.0)
        recall = np.where(tp + fn > 0, tp / (tp + fn), 0.0)
    return interpolated_precision(precision, recall, num_positions)


__all__ = ['DIFFICULTIES', 'NEIGHBOURS', 'clean_frame', 'dontcare_cover', 'frame_curve', 'pooled_curve',
           'interpolated_ap']
