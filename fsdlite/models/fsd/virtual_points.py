"""FSDv2 virtual points and the virtual-voxel mixer.

Voted centres of foreground points become *virtual points* that are voxelized together with the
real points (no connected components).  :class:`VirtualPointEncoder` gives both kinds one feature
width: real points project ``[neck feature, seg logits, raw features]``, virtual points project the
same plus ``[vote offset / 10, one-hot class]``; an indicator column marks virtual points.
:class:`VirtualVoxelMixer` is a small sparse UNet over the resulting voxels (output rows = input rows).
"""
from typing import NamedTuple

import torch
from mmengine.model import BaseModule

from ...registry import MODELS
from ..layers.execution import gather
from ..lidar.sparse_unet import SparseUNet
from .sir import linear_norm_act


class VirtualPointCloud(NamedTuple):
    """Real + virtual points: ``xyz`` (N + P, 3), ``feats`` (N + P, D + 1) (last column: 1 = virtual),
    ``batch`` (N + P,), ``is_virtual`` (N + P,) bool (the P virtual points come last)."""

    xyz: torch.Tensor
    feats: torch.Tensor
    batch: torch.Tensor
    is_virtual: torch.Tensor


@MODELS.register_module()
class VirtualPointEncoder(BaseModule):
    """Project real and virtual points to a common width.

    Args:
        in_channels (int): neck feature width F.
        num_classes (int): C (seg logits and one-hot class).
        raw_channels (int): raw point features beyond xyz (e.g. 1 for intensity).
        out_channels (int): D.
        offset_scale (float): vote offsets are divided by it.
    ``forward(point_feats (N, F), seg_logits (N, C), points (N, 3 + raw), batch (N,), fg)`` ->
    :class:`VirtualPointCloud` with ``out_channels + 1`` feature columns.
    """

    def __init__(self, in_channels, num_classes, raw_channels, out_channels=64, offset_scale=10.0, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.num_classes = int(num_classes)
        self.raw_channels = int(raw_channels)
        base = int(in_channels) + self.num_classes + self.raw_channels
        self.real_proj = linear_norm_act(base, out_channels)
        self.virtual_proj = linear_norm_act(base + 3 + self.num_classes, out_channels)
        self.offset_scale = float(offset_scale)
        self.out_channels = int(out_channels) + 1

    def forward(self, point_feats, seg_logits, points, batch, fg):
        """See the class docstring; ``fg`` is a :class:`~fsdlite.models.fsd.fg_sampler.ForegroundPoints`
        (in the fixed execution mode with padding slots, whose dump point index N reads zeros)."""
        if points.shape[1] != 3 + self.raw_channels:
            raise ValueError(f'VirtualPointEncoder: points must have 3 + raw_channels = {3 + self.raw_channels} '
                             f'columns, got {tuple(points.shape)}')
        base = torch.cat([point_feats, seg_logits, points[:, 3:]], dim=1)
        real = self.real_proj(base)
        p = fg.point_index
        offset = (fg.centre - gather(points[:, :3], p)) / self.offset_scale
        # (one_hot would read the ids' min and max on the host: no CUDA graph could hold it)
        onehot = (fg.class_id[:, None] == torch.arange(self.num_classes, device=fg.class_id.device)).to(base.dtype)
        virtual = self.virtual_proj(torch.cat([gather(base, p), offset, onehot], dim=1))
        is_virtual = torch.cat([torch.zeros(points.shape[0], dtype=torch.bool, device=points.device),
                                torch.ones(p.shape[0], dtype=torch.bool, device=points.device)])
        feats = torch.cat([torch.cat([real, virtual], dim=0), is_virtual[:, None].to(real.dtype)], dim=1)
        return VirtualPointCloud(torch.cat([points[:, :3], fg.centre]), feats, torch.cat([batch, fg.batch]),
                                 is_virtual)


@MODELS.register_module()
class VirtualVoxelMixer(SparseUNet):
    """FSDv2's mixer: a small :class:`~fsdlite.models.lidar.SparseUNet` over virtual voxels.

    Same arguments as SparseUNet with FSDv2-lite-sized defaults (3 stages, <= 64 channels); the
    output features are row-aligned with the input voxels, so every virtual voxel keeps its row.
    """

    def __init__(self, in_channels, voxel_size, point_range, base_channels=32,
                 encoder_channels=((32,), (64, 64), (64, 64)),
                 decoder_channels=((64, 64, 64), (64, 64, 32), (32, 32, 64)), **kwargs):
        super().__init__(in_channels, voxel_size, point_range, base_channels=base_channels,
                         encoder_channels=encoder_channels, decoder_channels=decoder_channels, **kwargs)
