"""grid_subsample: pool 3-D points into grid cells, per sample (KPConv's grid subsampling).

Cell key ``floor(p / voxel_size)`` (computed in float64, absolute grid) per sample; every
occupied cell yields the barycentre of its points, the mean of their features and their majority
label (ties -> smallest label). Cells are numbered in order of their first point, so a sorted
``batch`` gives cells grouped by sample. ``cell`` maps every point to its pooled row (pooling /
unpooling). The means are differentiable w.r.t. ``points`` and ``features``.
"""
from typing import NamedTuple, Optional

import torch

from .. import _checks
from .._checks import OpValueError
from ..build import register_autograd


_OP = 'grid_subsample'


class GridSubsampleResult(NamedTuple):
    """Output of :func:`grid_subsample` (M occupied cells, N input points)."""
    points: torch.Tensor              #: (M, 3) barycentre of each cell's points
    batch: torch.Tensor               #: (M,) int64 sample id of each cell (zeros when unbatched)
    features: Optional[torch.Tensor]  #: (M, C) mean features, or None
    labels: Optional[torch.Tensor]    #: (M,) int64 majority label, or None
    cell: torch.Tensor                #: (N,) int64 pooled row of every input point


@_checks.register_fake('fsdlite::grid_subsample')
def _grid_subsample_fake(points, voxel_size, batch=None, features=None, labels=None):
    m = torch.library.get_ctx().new_dynamic_size()
    long = dict(dtype=torch.long)
    return (points.new_empty((m, 3)), points.new_empty((m,), **long),
            features.new_empty((m, features.shape[1])) if features is not None else points.new_empty((0,)),
            points.new_empty((m,), **long) if labels is not None else points.new_empty((0,), **long),
            points.new_empty((points.shape[0],), **long))


def _setup_context(ctx, inputs, output):
    ctx.has_features = inputs[3] is not None
    cell = output[4]
    ctx.save_for_backward(cell, torch.bincount(cell, minlength=output[0].shape[0]).index_select(0, cell))
    ctx.mark_non_differentiable(output[1], output[3], output[4])


def _backward(ctx, grad_points, _grad_batch, grad_features, _grad_labels, _grad_cell):
    cell, count = ctx.saved_tensors  # count: (N,) points in each point's cell
    count = count[:, None]

    def spread(grad):  # d mean / d member = 1 / count
        return grad.index_select(0, cell) / count.to(grad.dtype)

    return spread(grad_points), None, None, spread(grad_features) if ctx.has_features else None, None


register_autograd('fsdlite::grid_subsample', _backward, setup_context=_setup_context)


def grid_subsample(points, voxel_size, batch=None, features=None, labels=None):
    """Subsample a point cloud on a regular grid (one output row per occupied cell and sample).

    Args:
        points (Tensor): (N, 3) float32/float64 finite coordinates.
        voxel_size (float | sequence of 3 floats): cell edge(s), finite and > 0.
        batch (Tensor, optional): (N,) int64 sample ids sorted non-decreasing.
        features (Tensor, optional): (N, C) float32/float64 features, averaged per cell.
        labels (Tensor, optional): (N,) int64/int32 labels; the majority per cell (ties ->
            smallest label) is returned as int64.
    Returns:
        GridSubsampleResult: ``points`` (M, 3), ``batch`` (M,), ``features`` (M, C) or None,
        ``labels`` (M,) or None, ``cell`` (N,) int64 with ``cell[i]`` the row of point i's cell;
        cells are ordered by their first point.
    """
    _checks.tensor(_OP, 'points', points, dtypes=(torch.float32, torch.float64), dim=2, size={1: (3, 'x, y, z')})
    sizes = voxel_size if isinstance(voxel_size, (list, tuple)) else [voxel_size] * 3
    if len(sizes) != 3:
        raise OpValueError(f'{_OP}: voxel_size must be a number or 3 numbers, got {voxel_size!r}')
    sizes = _checks.finite_positive(_OP, 'voxel_size', list(sizes))
    _checks.same_device(_OP, points=points, batch=batch, features=features, labels=labels)
    _checks.batch_ids(_OP, 'batch', batch, points.shape[0], 'points.shape[0]')  # finite points, sorted ids: C++
    if features is not None:
        _checks.tensor(_OP, 'features', features, dtypes=(torch.float32, torch.float64), dim=2,
                       size={0: (points.shape[0], 'points.shape[0]')})
    if labels is not None:
        _checks.tensor(_OP, 'labels', labels, dtypes=_checks.INDEX_DTYPES, dim=1,
                       size={0: (points.shape[0], 'points.shape[0]')})
        labels = labels.long()
    out = torch.ops.fsdlite.grid_subsample(points, sizes, batch, features, labels)
    return GridSubsampleResult(out[0], out[1], out[2] if features is not None else None,
                               out[3] if labels is not None else None, out[4])


__all__ = ['grid_subsample', 'GridSubsampleResult']
