"""Voxel-grid geometry shared by the data preprocessor, voxel encoders, backbones and necks.

Validation and grid sizes come from :func:`fsdlite.ops.grid_shape` (the voxelizer's own rule), so
every component agrees with the voxelization on the grid.
"""
import torch

from fsdlite.ops.voxelize import grid_shape
from fsdlite.utils.constants import const


def voxel_grid(voxel_size, point_range):
    """Validate a voxel grid and return ``(voxel_size, point_range, sparse_shape)``.

    Args:
        voxel_size (Sequence[float]): ``(vx, vy, vz)`` > 0.
        point_range (Sequence[float]): ``(x_min, y_min, z_min, x_max, y_max, z_max)`` with min < max.
    Returns:
        tuple: ``voxel_size`` (3 floats), ``point_range`` (6 floats), ``sparse_shape`` ``(nz, ny, nx)``.
    Raises:
        ValueError / TypeError naming the argument and the offending value.
    """
    sparse_shape = grid_shape(voxel_size, point_range)
    return tuple(float(v) for v in voxel_size), tuple(float(v) for v in point_range), tuple(sparse_shape)


def voxel_centers(voxel_coors, voxel_size, point_range, dtype=torch.float32):
    """Metric centres of voxels.

    Args:
        voxel_coors (Tensor): (V, 4) integer ``[b, z, y, x]`` grid coordinates.
        voxel_size (Sequence[float]): ``(vx, vy, vz)``.
        point_range (Sequence[float]): ``(x_min, y_min, z_min, x_max, y_max, z_max)``.
        dtype (torch.dtype): floating dtype of the result.
    Returns:
        Tensor: (V, 3) ``(x, y, z)`` centres.
    """
    xyz_index = voxel_coors[:, 1:].flip(1).to(dtype)  # [b, z, y, x] -> (x, y, z)
    size = const([float(v) for v in voxel_size], xyz_index.dtype, xyz_index.device)
    low = const([float(v) for v in point_range[:3]], xyz_index.dtype, xyz_index.device)
    return (xyz_index + 0.5) * size + low


__all__ = ['voxel_grid', 'voxel_centers']
