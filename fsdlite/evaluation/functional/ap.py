"""Average precision for 3D detection, KITTI style with 40 recall positions (R40).

The pipeline per class and IoU threshold:

1. :func:`match_detections` matches one frame's detections to its ground truth greedily in
   descending score order (each ground-truth box is matched at most once; a detection takes the
   unmatched box with the highest IoU >= threshold).  Ground truth marked *ignored* (e.g. boxes
   with too few points, KITTI's DontCare role) never counts as missed, and a detection whose
   best match is an ignored box is itself ignored (neither a true nor a false positive).
2. :func:`precision_recall` pools the scored TP/FP flags of all frames.
3. :func:`average_precision_r40` averages the interpolated precision
   ``p(r) = max_{r' >= r} precision(r')`` at the recall positions ``1/40, 2/40, ..., 1``.
"""
import numpy as np

NUM_RECALL_POSITIONS = 40


def match_detections(ious, scores, iou_threshold, gt_ignored=None):
    """Greedy score-ordered matching of one frame's detections to its ground truth.

    Args:
        ious (array): (D, G) IoU of every detection with every ground-truth box.
        scores (array): (D,) detection scores (ties keep the given order).
        iou_threshold (float): minimum IoU of a match (inclusive).
        gt_ignored (array, optional): (G,) bool, ground truth that is neither required nor penalised.
    Returns:
        tuple: ``is_tp`` (D,) bool and ``is_ignored`` (D,) bool, in the input order.
    """
    ious = np.asarray(ious, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    num_det = scores.shape[0]
    num_gt = ious.shape[1] if ious.ndim == 2 else 0
    if ious.shape != (num_det, num_gt):
        raise ValueError(f'match_detections: ious must be (D, G) = ({num_det}, G), got shape {ious.shape}')
    ignored_gt = np.zeros(num_gt, bool) if gt_ignored is None else np.asarray(gt_ignored, bool)
    if ignored_gt.shape != (num_gt,):
        raise ValueError(f'match_detections: gt_ignored must be ({num_gt},), got shape {ignored_gt.shape}')
    is_tp = np.zeros(num_det, bool)
    is_ignored = np.zeros(num_det, bool)
    taken = np.zeros(num_gt, bool)
    for d in np.argsort(-scores, kind='stable'):
        if num_gt == 0:
            break
        overlap = ious[d] >= iou_threshold
        candidates = overlap & ~taken & ~ignored_gt
        if candidates.any():
            g = int(np.argmax(np.where(candidates, ious[d], -1.0)))
            taken[g] = True
            is_tp[d] = True
        elif (overlap & ignored_gt).any():
            is_ignored[d] = True
    return is_tp, is_ignored


def precision_recall(scores, is_tp, num_gt):
    """Precision and recall after each detection, pooled over frames in descending score order.

    Args:
        scores (array): (D,) scores of the counted (non-ignored) detections of all frames.
        is_tp (array): (D,) bool true-positive flags.
        num_gt (int): number of non-ignored ground-truth boxes.
    Returns:
        tuple: ``precision`` (D,) and ``recall`` (D,) float64 arrays (recall is 0 when ``num_gt`` is 0).
    """
    scores = np.asarray(scores, dtype=np.float64)
    is_tp = np.asarray(is_tp, bool)
    if scores.shape != is_tp.shape or scores.ndim != 1:
        raise ValueError(f'precision_recall: scores and is_tp must be (D,) arrays of one length, '
                         f'got {scores.shape} and {is_tp.shape}')
    order = np.argsort(-scores, kind='stable')
    tp = np.cumsum(is_tp[order])
    count = np.arange(1, len(order) + 1)
    precision = tp / np.maximum(count, 1)
    recall = tp / num_gt if num_gt > 0 else np.zeros_like(precision)
    return precision, recall


def average_precision_r40(scores, is_tp, num_gt, num_positions=NUM_RECALL_POSITIONS):
    """Interpolated average precision at recall positions ``k / num_positions`` (k = 1..num_positions).

    Args:
        scores (array): (D,) scores of the counted detections of all frames.
        is_tp (array): (D,) bool true-positive flags.
        num_gt (int): number of non-ignored ground-truth boxes.
        num_positions (int): 40 for KITTI's R40.
    Returns:
        float: AP in [0, 1]; NaN when there is no ground truth (AP is undefined).
    """
    if num_gt < 0:
        raise ValueError(f'average_precision_r40: num_gt must be >= 0, got {num_gt}')
    if num_gt == 0:
        return float('nan')
    precision, recall = precision_recall(scores, is_tp, num_gt)
    return interpolated_precision(precision, recall, num_positions)


def interpolated_precision(precision, recall, num_positions=NUM_RECALL_POSITIONS):
    """Mean over the recall positions r = k / num_positions (k = 1..num_positions) of the best precision at any
    operating point whose recall is >= r (0 where none reaches r): KITTI's interpolated AP.

    Args:
        precision, recall (array): (P,) precision and recall of P operating points, in any order (KITTI's
            per-threshold re-matching makes recall non-monotonic in the score threshold).
        num_positions (int): 40 for R40.
    Returns:
        float: AP in [0, 1].
    """
    precision, recall = np.asarray(precision, dtype=np.float64), np.asarray(recall, dtype=np.float64)
    if precision.size == 0:
        return 0.0
    order = np.argsort(recall, kind='stable')
    precision, recall = precision[order], recall[order]
    best_after = np.maximum.accumulate(precision[::-1])[::-1]  # best precision at recall >= recall[i]
    positions = np.arange(1, num_positions + 1) / num_positions
    first = np.searchsorted(recall, positions - 1e-12, side='left')
    reached = first < recall.size
    values = np.where(reached, best_after[np.minimum(first, recall.size - 1)], 0.0)
    return float(values.mean())
