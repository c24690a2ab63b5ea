"""Sparse 3D UNet on spconv whose output voxel set (and row order) equals its input."""
import torch
from torch import nn

from fsdlite.registry import MODELS

from ..layers.channels import stage_channels
from ..layers.norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG
from ..layers.sparse_block import sparse_conv_block, sparse_sequential, to_sparse_tensor
from ..layers.voxel_geometry import voxel_grid


def _sum_channel_groups(features, out_channels):
    """(V, k * out_channels) -> (V, out_channels) by summing groups of k consecutive channels."""
    return features.view(features.shape[0], out_channels, -1).sum(dim=2)


@MODELS.register_module()
class SparseUNet(nn.Module):
    """Encoder-decoder of sparse convolutions (FSD's SimpleSparseUNet layout).

    * ``conv_input``: SubMConv3d ``in_channels -> base_channels``.
    * encoder stage ``s`` has one conv per entry of ``encoder_channels[s]``; stage 0 keeps the input
      resolution (SubMConv3d only), each later stage starts with a stride-2 SparseConv3d followed by
      SubMConv3d layers.
    * decoder stage ``j`` (deepest first; ``s = S - 1 - j``) has ``decoder_channels[j] =
      (lateral, merge, up)``: a SubMConv3d lateral block on the encoder output of stage ``s``, a
      SubMConv3d merge of ``[incoming, lateral]`` plus a parameter-free shortcut (sum of channel groups,
      so ``lateral + incoming`` must be a multiple of ``merge``), then an inverse conv back to stage
      ``s - 1``'s voxels (``up`` channels) or, for ``s = 0``, a SubMConv3d output layer.

    Because every upsampling inverts a recorded downsampling and the last layer is submanifold, the
    output features are row-aligned with the input voxels.  Channels and depths are flat per-stage
    tuples, so a slimmed network is just a different config.

    Args:
        in_channels (int): C_in of the voxel features.
        voxel_size, point_range: voxel grid; the sparse shape is ``fsdlite.ops.grid_shape`` of them.
        base_channels (int): width of ``conv_input``.
        encoder_channels (Sequence[Sequence[int]]): per-stage conv widths, e.g. ``((16,), (32, 32))``.
        decoder_channels (Sequence[Sequence[int]]): per decoder stage ``(lateral, merge, up)``; one per
            encoder stage.
        norm_cfg, act_cfg (dict | None): norm / activation after every conv.
    """

    def __init__(self, in_channels, voxel_size, point_range, base_channels=16,
                 encoder_channels=((16,), (32, 32), (64, 64)),
                 decoder_channels=((64, 64, 32), (32, 32, 16), (16, 16, 16)),
                 norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG):
        super().__init__()
        _, _, self.sparse_shape = voxel_grid(voxel_size, point_range)
        self.encoder_channels = stage_channels('encoder_channels', encoder_channels)
        self.decoder_channels = stage_channels('decoder_channels', decoder_channels, length=3)
        if len(self.decoder_channels) != len(self.encoder_channels):
            raise ValueError(f'decoder_channels needs one (lateral, merge, up) entry per encoder stage '
                             f'({len(self.encoder_channels)}), got {len(self.decoder_channels)}: {decoder_channels!r}')
        self.in_channels = int(in_channels)
        blk = dict(norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.conv_input = sparse_conv_block('SubMConv3d', self.in_channels, base_channels, indice_key='subm1', **blk)
        self.encoder = nn.ModuleList()
        prev = base_channels
        for s, widths in enumerate(self.encoder_channels):
            layers = []
            for k, c in enumerate(widths):
                if s > 0 and k == 0:
                    layers.append(sparse_conv_block('SparseConv3d', prev, c, stride=2, padding=1,
                                                    indice_key=f'spconv{s + 1}', **blk))
                else:
                    layers.append(sparse_conv_block('SubMConv3d', prev, c, indice_key=f'subm{s + 1}', **blk))
                prev = c
            self.encoder.append(sparse_sequential(*layers))
        self.lateral, self.merge, self.upsample = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        num_stages = len(self.encoder_channels)
        for j, (lat, mer, up) in enumerate(self.decoder_channels):
            s = num_stages - 1 - j
            skip = self.encoder_channels[s][-1]
            if (lat + prev) % mer:
                raise ValueError(f'decoder_channels[{j}]={self.decoder_channels[j]!r}: lateral ({lat}) + incoming '
                                 f'({prev}) channels must be a multiple of merge ({mer}) for the shortcut')
            self.lateral.append(sparse_conv_block('SubMConv3d', skip, lat, indice_key=f'subm{s + 1}', **blk))
            self.merge.append(sparse_conv_block('SubMConv3d', lat + prev, mer, indice_key=f'subm{s + 1}', **blk))
            if s > 0:
                self.upsample.append(sparse_conv_block('SparseInverseConv3d', mer, up, indice_key=f'spconv{s + 1}',
                                                       **blk))
            else:
                self.upsample.append(sparse_conv_block('SubMConv3d', mer, up, indice_key='subm1', **blk))
            prev = up
        self.out_channels = prev

    def forward(self, voxel_feats, voxel_coors, batch_size):
        """Run the UNet.

        Args:
            voxel_feats (Tensor): (V, in_channels) float features (V >= 1).
            voxel_coors (Tensor): (V, 4) int ``[b, z, y, x]`` inside ``sparse_shape``, unique rows.
            batch_size (int): B.
        Returns:
            Tensor: (V, out_channels) features, row ``i`` belonging to ``voxel_coors[i]``.
        """
        if voxel_feats.dim() != 2 or voxel_feats.shape[1] != self.in_channels:
            raise ValueError(f'voxel_feats must have shape (V, {self.in_channels}), got {tuple(voxel_feats.shape)}')
        if voxel_feats.shape[0] == 0:
            raise ValueError('SparseUNet needs at least one voxel (V >= 1); callers must handle empty batches')
        x = self.conv_input(to_sparse_tensor(voxel_feats, voxel_coors, self.sparse_shape, batch_size))
        skips = []
        for stage in self.encoder:
            x = stage(x)
            skips.append(x)
        for lateral, merge, upsample, skip in zip(self.lateral, self.merge, self.upsample, reversed(skips)):
            lat = lateral(skip)
            cat = lat.replace_feature(torch.cat([x.features, lat.features], 1))
            merged = merge(cat)
            shortcut = _sum_channel_groups(cat.features, merged.features.shape[1])
            x = upsample(merged.replace_feature(merged.features + shortcut))
        return x.features


__all__ = ['SparseUNet']
