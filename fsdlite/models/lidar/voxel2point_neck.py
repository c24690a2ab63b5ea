"""Voxel-to-point neck: each point takes its voxel's feature plus its offset to the voxel centre."""
import torch
from torch import nn

from fsdlite.registry import MODELS
from fsdlite.utils.constants import const

from ..layers.execution import gather
from ..layers.voxel_geometry import voxel_centers, voxel_grid


@MODELS.register_module()
class Voxel2PointNeck(nn.Module):
    """Gather voxel features back to points (FSD's Voxel2PointScatterNeck without the scatter).

    Output per point: ``[voxel_feats[point2voxel], (xyz - voxel_centre) / offset_scale]`` with
    ``offset_scale`` = the voxel size when ``normalize_offset`` (so offsets lie in [-0.5, 0.5)), else 1.

    Args:
        in_channels (int): C of the voxel features.
        voxel_size, point_range: the voxel grid (for voxel centres).
        normalize_offset (bool): divide the offset by the voxel size.
    """

    def __init__(self, in_channels, voxel_size, point_range, normalize_offset=True):
        super().__init__()
        self.voxel_size, self.point_range, _ = voxel_grid(voxel_size, point_range)
        self.in_channels = int(in_channels)
        self.normalize_offset = bool(normalize_offset)
        self.out_channels = self.in_channels + 3

    def forward(self, voxel_feats, points, point2voxel, voxel_coors):
        """Point features for the P points.

        Args:
            voxel_feats (Tensor): (V, in_channels).
            points (Tensor): (P, >=3) points (xyz first).
            point2voxel (Tensor): (P,) int64 in ``[0, V)``; in the fixed execution mode ``V`` (dump slot, padding
                points) reads zeros.
            voxel_coors (Tensor): (V, 4) int ``[b, z, y, x]``.
        Returns:
            Tensor: (P, in_channels + 3).
        """
        if voxel_feats.dim() != 2 or voxel_feats.shape[1] != self.in_channels:
            raise ValueError(f'voxel_feats must have shape (V, {self.in_channels}), got {tuple(voxel_feats.shape)}')
        if voxel_feats.shape[0] != voxel_coors.shape[0]:
            raise ValueError(f'voxel_feats has {voxel_feats.shape[0]} rows but voxel_coors has {voxel_coors.shape[0]}')
        centers = voxel_centers(voxel_coors, self.voxel_size, self.point_range, dtype=points.dtype)
        offset = points[:, :3] - gather(centers, point2voxel)
        if self.normalize_offset:
            offset = offset / const([float(v) for v in self.voxel_size], offset.dtype, offset.device)
        return torch.cat([gather(voxel_feats, point2voxel), offset.to(voxel_feats.dtype)], 1)


__all__ = ['Voxel2PointNeck']
