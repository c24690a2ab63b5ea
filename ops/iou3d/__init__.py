"""iou3d: bird's-eye-view IoU and NMS of 7-dof lidar boxes ``[x, y, z, l, w, h, yaw]``.

Boxes are (N, >=7) floating tensors (extra columns, e.g. velocities, are ignored); only x, y,
l, w and yaw matter.  The BEV footprint is the rectangle centred at (x, y) with extent ``l``
along the heading (cos yaw, sin yaw) and ``w`` across it (mmdet3d LiDAR convention).
``*_aligned`` variants are **axis-aligned** (yaw ignored: x +- l/2, y +- w/2, as mmdet3d's
``nms_normal_bev``), not pairwise.  Geometry runs in float64 whatever the input dtype (absolute
area error ~1e-16 x extent^2, so slivers thinner than ~1e-12 of their length get a noisy IoU); an
empty union (degenerate zero-size boxes) gives IoU 0, never NaN.  None of these functions is
differentiable (outputs carry no gradient).

NMS semantics: candidates are visited by descending score; **equal scores go to the lower
index first** (stable sort).  A candidate is suppressed when an already kept box (of the
same label and sample, for :func:`batched_nms_bev`) has IoU **strictly greater** than
``iou_threshold``.
"""
import torch

from .. import _checks
from .._checks import OpTypeError, OpValueError


_IOU_OP = 'boxes_iou_bev'


@_checks.register_fake('fsdlite::boxes_iou_bev')
def _boxes_iou_bev_fake(boxes_a, boxes_b, axis_aligned):
    return boxes_a.new_empty((boxes_a.shape[0], boxes_b.shape[0]))


@_checks.register_fake('fsdlite::nms_bev_mask')
def _nms_bev_mask_fake(boxes, groups, iou_threshold, axis_aligned):
    return boxes.new_empty((boxes.shape[0],), dtype=torch.bool)


def check_boxes(op, name, boxes, values=True):
    """Validate (N, >=7) floating lidar boxes and, with ``values``, that they are finite with non-negative l and w
    (leave the values to the C++ op where it receives the boxes as given); returns them."""
    _checks.tensor(op, name, boxes, floating=True, dim=2)
    _checks.min_size(op, name, boxes, 1, 7, 'columns [x, y, z, l, w, h, yaw]')
    if not values:
        return boxes
    _checks.finite(op, name, boxes)
    negative = (boxes[:, 3:5] < 0).nonzero()
    if negative.numel():
        row, col = (int(v) for v in negative[0])
        raise OpValueError(f'{op}: {name} must have sizes l, w >= 0, got {name}[{row}, {col + 3}]='
                           f'{boxes[row, col + 3].item()}')
    return boxes


def _iou(boxes_a, boxes_b, axis_aligned):
    _checks.same_device(_IOU_OP, boxes_a=boxes_a, boxes_b=boxes_b)  # first: value checks cannot run on 'meta'
    check_boxes(_IOU_OP, 'boxes_a', boxes_a, values=False)  # values: checked by the C++ op, once
    check_boxes(_IOU_OP, 'boxes_b', boxes_b, values=False)
    if boxes_b.dtype != boxes_a.dtype:
        raise OpTypeError(f'{_IOU_OP}: boxes_b must have the dtype of boxes_a ({boxes_a.dtype}), got {boxes_b.dtype}')
    with torch.no_grad():
        return torch.ops.fsdlite.boxes_iou_bev(boxes_a, boxes_b, axis_aligned)


def boxes_iou_bev(boxes_a, boxes_b):
    """Rotated BEV IoU of every pair of boxes.

    Args:
        boxes_a (Tensor): (N, >=7) lidar boxes ``[x, y, z, l, w, h, yaw]``.
        boxes_b (Tensor): (M, >=7) boxes, same dtype and device.
    Returns:
        Tensor: (N, M) IoU in [0, 1], dtype of ``boxes_a``.
    """
    return _iou(boxes_a, boxes_b, False)


def boxes_iou_bev_aligned(boxes_a, boxes_b):
    """Axis-aligned BEV IoU (yaw ignored) of every pair: (N, >=7), (M, >=7) -> (N, M)."""
    return _iou(boxes_a, boxes_b, True)


def _optional_ids(op, name, value, n):
    if value is None:
        return None
    _checks.tensor(op, name, value, dtypes=_checks.INDEX_DTYPES, dim=1, size={0: (n, 'boxes.shape[0]')})
    _checks.index_range(op, name, value, 0, 2 ** 62)
    return value.long()


def _rank_in_sample(sample_sorted):
    """Rank of each entry within its run of equal values (input sorted ascending)."""
    first = torch.searchsorted(sample_sorted, sample_sorted)
    return torch.arange(len(sample_sorted), device=sample_sorted.device) - first


def _nms(op, boxes, scores, labels, batch, iou_threshold, pre_max, post_max, axis_aligned):
    _checks.same_device(op, boxes=boxes, scores=scores, labels=labels, batch=batch)  # first: value checks
    check_boxes(op, 'boxes', boxes)
    n = boxes.shape[0]
    _checks.tensor(op, 'scores', scores, floating=True, dim=1, size={0: (n, 'boxes.shape[0]')})
    _checks.finite(op, 'scores', scores)
    labels = _optional_ids(op, 'labels', labels, n)
    batch = _optional_ids(op, 'batch', batch, n)
    iou_threshold = _checks.finite_positive(op, 'iou_threshold', iou_threshold, allow_zero=True)
    if iou_threshold > 1:
        raise OpValueError(f'{op}: iou_threshold must lie in [0, 1], got {iou_threshold!r}')
    pre_max = None if pre_max is None else _checks.positive_int(op, 'pre_max', pre_max, allow_zero=True)
    post_max = None if post_max is None else _checks.positive_int(op, 'post_max', post_max, allow_zero=True)
    with torch.no_grad():
        order = torch.argsort(scores, descending=True, stable=True)
        if batch is not None:
            order = order[torch.argsort(batch[order], stable=True)]
        if pre_max is not None:
            rank = _rank_in_sample(batch[order]) if batch is not None else torch.arange(len(order), device=order.device)
            order = order[rank < pre_max]
        groups = torch.zeros(n, dtype=torch.long, device=boxes.device) if labels is None else labels
        if batch is not None and labels is not None and n:
            # one id per (sample, label) pair; two 1-D uniques keep the product below n**2 (no int64 overflow),
            # and avoid torch.unique(dim=0), whose CPU kernel compares rows through dispatched select/equal calls
            label_ids = torch.unique(labels, return_inverse=True)[1]
            sample_ids, num_label_ids = torch.unique(batch, return_inverse=True)[1], int(label_ids.max()) + 1
            groups = sample_ids * num_label_ids + label_ids
        elif batch is not None:
            groups = batch
        keep = torch.ops.fsdlite.nms_bev_mask(boxes[order], groups[order], iou_threshold, axis_aligned)
        kept = order[keep]
        if post_max is not None:
            rank = _rank_in_sample(batch[kept]) if batch is not None else torch.arange(len(kept), device=kept.device)
            kept = kept[rank < post_max]
        return kept


def nms_bev(boxes, scores, iou_threshold, pre_max=None, post_max=None):
    """Greedy rotated BEV NMS.

    Args:
        boxes (Tensor): (N, >=7) lidar boxes.
        scores (Tensor): (N,) finite floating scores.
        iou_threshold (float): in [0, 1]; boxes with IoU > threshold to a kept box are dropped.
        pre_max (int, optional): only the ``pre_max`` highest-scoring boxes are candidates.
        post_max (int, optional): at most ``post_max`` boxes are returned.
    Returns:
        Tensor: (K,) int64 indices into ``boxes``, by descending score (ties: lower index first).
    """
    return _nms('nms_bev', boxes, scores, None, None, iou_threshold, pre_max, post_max, False)


def nms_bev_aligned(boxes, scores, iou_threshold, pre_max=None, post_max=None):
    """Greedy axis-aligned BEV NMS (yaw ignored); arguments and result as :func:`nms_bev`."""
    return _nms('nms_bev_aligned', boxes, scores, None, None, iou_threshold, pre_max, post_max, True)


def batched_nms_bev(boxes, scores, labels, iou_threshold, pre_max=None, post_max=None, batch=None,
                    axis_aligned=False):
    """Class-wise (and sample-wise) greedy BEV NMS: boxes only suppress boxes of their own label and sample.

    Args:
        boxes (Tensor): (N, >=7) lidar boxes.
        scores (Tensor): (N,) finite floating scores.
        labels (Tensor): (N,) int64 class ids >= 0.
        iou_threshold (float): in [0, 1] (suppress when IoU > threshold).
        pre_max (int, optional): candidates per sample (highest scores over all classes).
        post_max (int, optional): kept boxes per sample (highest scores over all classes).
        batch (Tensor, optional): (N,) int64 sample id >= 0 of each box (any order).
        axis_aligned (bool): ignore yaw.
    Returns:
        Tensor: (K,) int64 indices into ``boxes``, ordered by sample, then by descending score
        (ties: lower index first).
    """
    if labels is None:
        raise OpTypeError('batched_nms_bev: labels must be a (N,) int64 tensor, got None (use nms_bev without labels)')
    return _nms('batched_nms_bev', boxes, scores, labels, batch, iou_threshold, pre_max, post_max, axis_aligned)


__all__ = ['boxes_iou_bev', 'boxes_iou_bev_aligned', 'nms_bev', 'nms_bev_aligned', 'batched_nms_bev']
