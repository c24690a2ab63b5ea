"""voxelize: dynamic voxelization with unique voxels in first-occurrence order.

A point is inside iff ``0 <= floor((p - min) / size) < grid`` on x, y and z (mmcv's rule, computed in
the points' dtype); points outside the range or with a NaN/Inf coordinate are excluded and counted,
never silently dropped.  Not differentiable (integer outputs).
"""
from typing import NamedTuple

import torch

from .. import _checks
from .._checks import OpValueError
from ._grid import check_geometry, check_key_range, grid_shape


_OP = 'voxelize'


class Voxelization(NamedTuple):
    """Result of :func:`voxelize` (N points, V unique voxels); all tensors int64 on the points' device."""
    voxel_coors: torch.Tensor       #: (V, 4) [batch, z, y, x], in order of first occurrence
    point2voxel: torch.Tensor       #: (N,) row of each point's voxel in voxel_coors; -1 if excluded
    voxel_counts: torch.Tensor      #: (V,) points per voxel
    point_coors: torch.Tensor       #: (N, 4) [batch, z, y, x]; -1 rows for excluded points
    num_out_of_range: torch.Tensor  #: () finite points outside point_range
    num_non_finite: torch.Tensor    #: () points with a NaN/Inf coordinate


@_checks.register_fake('fsdlite::voxelize')
def _voxelize_fake(points, voxel_size, point_range, batch):
    num_voxels = torch.library.get_ctx().new_dynamic_size()
    n = points.shape[0]
    long = dict(dtype=torch.long, device=points.device)
    return (points.new_empty((num_voxels, 4), **long), points.new_empty((n,), **long),
            points.new_empty((num_voxels,), **long), points.new_empty((n, 4), **long),
            points.new_empty((), **long), points.new_empty((), **long))


def _check_batch(batch, points):
    """The optional (N,) batch ids as int64; their values (>= 0, and the keys of batches x grid fitting in int64)
    are checked once, by the C++ op."""
    if batch is None:
        return None
    _checks.tensor(_OP, 'batch', batch, dtypes=_checks.INDEX_DTYPES, dim=1,
                   size={0: (points.shape[0], 'points.shape[0]')})
    _checks.same_device(_OP, points=points, batch=batch)
    return batch.long()


def voxelize(points, voxel_size, point_range, batch=None):
    """Dynamic voxelization of a (batched) point cloud.

    Args:
        points (Tensor): (N, >=3) float32/float64; xyz in the first 3 columns.
        voxel_size (sequence): 3 positive floats (x, y, z).
        point_range (sequence): 6 floats ``[x_min, y_min, z_min, x_max, y_max, z_max]``.
        batch (Tensor, optional): (N,) int64 sample id of each point (>= 0, any order).
    Returns:
        Voxelization: ``voxel_coors`` (V, 4) int64 [batch, z, y, x] in first-occurrence order,
        ``point2voxel`` (N,), ``voxel_counts`` (V,), ``point_coors`` (N, 4) (-1 rows / -1 for excluded
        points), ``num_out_of_range`` and ``num_non_finite`` (0-d int64).
    """
    _checks.tensor(_OP, 'points', points, dtypes=(torch.float32, torch.float64), dim=2)
    if points.shape[1] < 3:
        raise OpValueError(f'{_OP}: points must have shape (N, >=3), got shape {tuple(points.shape)}')
    size, lower, upper = check_geometry(voxel_size, point_range)
    batch = _check_batch(batch, points)
    check_key_range(grid_shape(size, lower + upper), 1)  # the grid alone; with the batch ids in C++
    return Voxelization(*torch.ops.fsdlite.voxelize(points, size, lower + upper, batch))


__all__ = ['voxelize', 'grid_shape', 'Voxelization']
