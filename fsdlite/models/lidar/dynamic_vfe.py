"""Dynamic voxel feature encoder: point-wise MLPs with a per-voxel max, gathered back to points."""
import torch
from torch import nn

from fsdlite.registry import MODELS

from ..layers.channels import channel_tuple
from ..layers.execution import gather, segment_reduce
from ..layers.mlp import LinearNormAct
from ..layers.norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG
from ..layers.voxel_geometry import voxel_centers, voxel_grid


@MODELS.register_module()
class DynamicVFE(nn.Module):
    """Encode the points of each voxel into one feature (FSD's DynamicScatterVFE, without torch_scatter).

    Per point the input is ``[x, y, z, features...]`` plus, optionally, its offset to the mean of the
    points in its voxel (``with_cluster_center``) and to the voxel centre (``with_voxel_center``).
    Each layer ``i`` is ``Linear -> norm -> act`` giving (P, c_i) point features, followed by a
    per-voxel max (:func:`fsdlite.ops.segment_reduce`); between layers the voxel max is gathered back
    to the points and concatenated (so layer ``i+1`` sees ``2 * c_i`` channels).

    Args:
        in_channels (int): C of the (P, C) points (x, y, z and point features).
        feat_channels (Sequence[int]): widths of the layers, e.g. ``(32, 32)``.
        voxel_size (Sequence[float]): ``(vx, vy, vz)`` (for voxel centres).
        point_range (Sequence[float]): ``(x_min, y_min, z_min, x_max, y_max, z_max)``.
        with_cluster_center (bool): add the offset to the voxel's point mean (3 channels).
        with_voxel_center (bool): add the offset to the voxel centre (3 channels).
        norm_cfg (dict | None): norm config of each layer.
        act_cfg (dict | None): activation config of each layer.
    """

    def __init__(self, in_channels, feat_channels, voxel_size, point_range, with_cluster_center=True,
                 with_voxel_center=True, norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG):
        super().__init__()
        if isinstance(in_channels, bool) or not isinstance(in_channels, int) or in_channels < 3:
            raise ValueError(f'in_channels must be an int >= 3 (x, y, z, ...), got {in_channels!r}')
        self.feat_channels = channel_tuple('feat_channels', feat_channels)
        if not self.feat_channels:
            raise ValueError(f'feat_channels must have at least one layer, got {feat_channels!r}')
        self.voxel_size, self.point_range, _ = voxel_grid(voxel_size, point_range)
        self.in_channels = in_channels
        self.with_cluster_center = bool(with_cluster_center)
        self.with_voxel_center = bool(with_voxel_center)
        prev = in_channels + 3 * (self.with_cluster_center + self.with_voxel_center)
        layers = []
        for i, c in enumerate(self.feat_channels):
            layers.append(LinearNormAct(prev if i == 0 else 2 * prev, c, norm_cfg, act_cfg))
            prev = c
        self.layers = nn.ModuleList(layers)
        self.out_channels = self.feat_channels[-1]

    def point_inputs(self, points, point2voxel, voxel_coors):
        """(P, C') per-point input features: raw values and the optional centre offsets."""
        feats = [points]
        xyz = points[:, :3]
        if self.with_cluster_center:
            mean = segment_reduce(xyz, point2voxel, voxel_coors.shape[0], 'mean')
            feats.append(xyz - gather(mean, point2voxel))
        if self.with_voxel_center:
            centers = voxel_centers(voxel_coors, self.voxel_size, self.point_range, dtype=points.dtype)
            feats.append(xyz - gather(centers, point2voxel))
        return torch.cat(feats, 1)

    def forward(self, points, point2voxel, voxel_coors):
        """Encode voxels.

        Args:
            points (Tensor): (P, in_channels) float points; every point belongs to a voxel.
            point2voxel (Tensor): (P,) int64 voxel row of each point, in ``[0, V)``; in the fixed execution mode
                (:mod:`~fsdlite.models.layers.execution`) ``V`` is the dump slot (padding points, excluded from
                every voxel; their rows of the point features are unspecified).
            voxel_coors (Tensor): (V, 4) int64 ``[b, z, y, x]``.
        Returns:
            tuple[Tensor, Tensor]: voxel features (V, out_channels) and point features
            (P, out_channels) of the last layer (before the voxel max).
        """
        if points.dim() != 2 or points.shape[1] != self.in_channels:
            raise ValueError(f'points must have shape (P, {self.in_channels}), got {tuple(points.shape)}')
        if point2voxel.shape != (points.shape[0],):
            raise ValueError(f'point2voxel must have shape ({points.shape[0]},), got {tuple(point2voxel.shape)}')
        num_voxels = voxel_coors.shape[0]
        point_feats = self.layers[0](self.point_inputs(points, point2voxel, voxel_coors))
        voxel_feats = segment_reduce(point_feats, point2voxel, num_voxels, 'max')
        for layer in self.layers[1:]:  # layer(cat([point_feats, voxel_feats[point2voxel]])), without the concat
            point_feats = layer.forward_gathered_concat(point_feats, voxel_feats, point2voxel, gather)
            voxel_feats = segment_reduce(point_feats, point2voxel, num_voxels, 'max')
        return voxel_feats, point_feats


__all__ = ['DynamicVFE']
