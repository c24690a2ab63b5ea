"""points_in_boxes: the 7-dof lidar box containing each point (mmcv's rule), batched by sample.

Boxes are ``[x, y, z, l, w, h, yaw]`` (yaw counter-clockwise about +z from +x, ``l`` along the
heading).  ``box_origin`` says what ``z`` is: ``'bottom'`` (bottom-face centre, fsdlite/mmdet3d lidar
boxes) or ``'center'`` (gravity centre, e.g. nuScenes infos).  A point is inside a box when its offset
rotated by ``-yaw`` is strictly inside the footprint (``|dx| < l/2``, ``|dy| < w/2``) and its height is
inclusively inside the vertical extent (``z_low <= z <= z_high``) -- so points exactly on a side face
are outside, points exactly on the top or bottom face are inside.  Geometry is evaluated in float64
whatever the input dtype.  Boxes with NaN parameters or negative sizes contain nothing.

Batching is segment-style: ``point_batch`` (N,) and ``box_batch`` (M,) give each point's / box's sample
id (any non-negative int64, unsorted allowed); a point is only tested against boxes of its own sample.
Omit both for a single sample.
"""
import torch

from .. import _checks
from .._checks import OpValueError


BOX_ORIGINS = ('bottom', 'center')


@_checks.register_fake('fsdlite::points_in_boxes')
def _points_in_boxes_fake(points, boxes, point_batch, box_batch, box_origin):
    return points.new_empty((points.shape[0],), dtype=torch.long)


@_checks.register_fake('fsdlite::points_in_boxes_all')
def _points_in_boxes_all_fake(points, boxes, point_batch, box_batch, box_origin):
    return points.new_empty((points.shape[0], boxes.shape[0]), dtype=torch.bool)


def _validated(op, points, boxes, point_batch, box_batch, box_origin):
    _checks.tensor(op, 'points', points, floating=True, dim=2)
    if points.shape[1] < 3:
        raise OpValueError(f'{op}: points must have shape (N, >=3) (x, y, z, ...), got {tuple(points.shape)}')
    _checks.tensor(op, 'boxes', boxes, floating=True, dim=2, size={1: (7, 'x, y, z, l, w, h, yaw')})
    _checks.choice(op, 'box_origin', box_origin, BOX_ORIGINS)
    if (point_batch is None) != (box_batch is None):
        given = 'point_batch' if point_batch is not None else 'box_batch'
        raise OpValueError(f'{op}: point_batch and box_batch must be given together, got only {given}')
    if point_batch is not None:
        _checks.tensor(op, 'point_batch', point_batch, dtypes=_checks.INDEX_DTYPES, dim=1,
                       size={0: (points.shape[0], 'points.shape[0]')})
        _checks.tensor(op, 'box_batch', box_batch, dtypes=_checks.INDEX_DTYPES, dim=1,
                       size={0: (boxes.shape[0], 'boxes.shape[0]')})
        _checks.same_device(op, points=points, boxes=boxes, point_batch=point_batch, box_batch=box_batch)
        point_batch, box_batch = point_batch.long(), box_batch.long()
    else:
        _checks.same_device(op, points=points, boxes=boxes)
    return point_batch, box_batch


def points_in_boxes(points, boxes, point_batch=None, box_batch=None, box_origin='bottom'):
    """Index of the box containing each point; the lowest box index wins where boxes overlap.

    Args:
        points (Tensor): (N, 3+) float; only x, y, z (the first three columns) are used.
        boxes (Tensor): (M, 7) float ``[x, y, z, l, w, h, yaw]``.
        point_batch (Tensor, optional): (N,) int64/int32 sample id of each point (>= 0).
        box_batch (Tensor, optional): (M,) int64/int32 sample id of each box (>= 0).
        box_origin (str): ``'bottom'`` (z = bottom-face centre) or ``'center'`` (z = gravity centre).
    Returns:
        Tensor: (N,) int64 box index in ``[0, M)``, or -1 for points in no box of their sample.
    """
    point_batch, box_batch = _validated('points_in_boxes', points, boxes, point_batch, box_batch, box_origin)
    return torch.ops.fsdlite.points_in_boxes(points, boxes, point_batch, box_batch, box_origin)


def points_in_boxes_all(points, boxes, point_batch=None, box_batch=None, box_origin='bottom'):
    """Membership of every point in every box of its sample.

    Args: as :func:`points_in_boxes`.
    Returns:
        Tensor: (N, M) bool; ``[i, j]`` is True when point i lies in box j and both share a sample.
    """
    point_batch, box_batch = _validated('points_in_boxes_all', points, boxes, point_batch, box_batch, box_origin)
    return torch.ops.fsdlite.points_in_boxes_all(points, boxes, point_batch, box_batch, box_origin)


def count_points_in_boxes(points, boxes, point_batch=None, box_batch=None, box_origin='bottom'):
    """Number of points inside each box (every containing box counts, overlaps included).

    Args: as :func:`points_in_boxes`.
    Returns:
        Tensor: (M,) int64.
    """
    return points_in_boxes_all(points, boxes, point_batch, box_batch, box_origin).sum(dim=0)


__all__ = ['points_in_boxes', 'points_in_boxes_all', 'count_points_in_boxes', 'BOX_ORIGINS']
