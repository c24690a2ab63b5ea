"""KPConv encoder (KPCNN / KPFCNN trunk) and decoder, built from flat per-stage tuples.

Stage 0 = a :class:`SimpleBlock` stem + ``blocks[0] - 1`` bottlenecks at level 0; stage l >= 1 = a
strided bottleneck (level l - 1 -> l) + ``blocks[l] - 1`` bottlenecks at level l.  Level l's conv
radius is ``conv_radius * first_subsampling_dl * 2**l`` (a strided conv uses its input level's).
``conv_types`` gives each stage's kernel-point layer (a registered type name or a config dict);
``conv_defaults`` applies to every conv (e.g. ``kernel_size``, ``influence``, ``impl``).
"""
import copy

import torch
from mmengine.logging import print_log
from torch import nn

from fsdlite.registry import MODELS

from ..layers.mlp import LinearNormAct
from .blocks import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG, NearestUpsampleBlock, ResnetBottleneckBlock, SimpleBlock


def _conv_cfg(conv, defaults, what):
    if isinstance(conv, str):
        conv = dict(type=conv)
    if not isinstance(conv, dict) or 'type' not in conv:
        raise TypeError(f'KPEncoder: {what} must be a layer type name or a dict with "type", got {conv!r}')
    return {**copy.deepcopy(dict(defaults)), **copy.deepcopy(dict(conv))}


def check_norm_momentum(norm_cfg, owner):
    """Warn when a BatchNorm momentum looks TensorFlow-style (PyTorch's momentum is the new batch's weight)."""
    momentum = (norm_cfg or {}).get('momentum')
    if momentum is not None and str((norm_cfg or {}).get('type', '')).startswith('BN') and momentum > 0.5:
        print_log(f'{owner}: BatchNorm momentum={momentum} gives the NEW batch weight {momentum} (PyTorch semantics): '
                  'running statistics ~ the last batch. Use 0.02-0.1 unless this is deliberate (ablation).',
                  logger='current', level=30)


@MODELS.register_module()
class KPEncoder(nn.Module):
    """Multi-level kernel-point encoder.

    Args:
        in_channels (int): input feature width F.
        channels (Sequence[int]): width of each stage (L stages = L pyramid levels).
        blocks (Sequence[int]): blocks per stage (>= 1).
        conv_types (Sequence[str | dict]): kernel-point layer of each stage.
        first_subsampling_dl (float): level-0 grid cell.
        conv_radius (float): conv radius in cells.
        stem (str | dict): layer of the stem block (must map F -> channels[0]: KPConv).
        conv_defaults (dict): arguments given to every conv.
        norm_cfg, act_cfg (dict): norm (PyTorch BN momentum, e.g. 0.05) and activation.
        bottleneck_ratio (int): width reduction inside bottlenecks.
    Forward: ``KPPyramid -> list of (N_l, channels[l]) features``, one per level.
    """

    def __init__(self, in_channels, channels, blocks, conv_types, first_subsampling_dl, conv_radius=2.5,
                 stem='KPConv', conv_defaults=None, norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG,
                 bottleneck_ratio=4):
        super().__init__()
        channels, blocks, conv_types = tuple(channels), tuple(blocks), tuple(conv_types)
        if not (len(channels) == len(blocks) == len(conv_types) >= 1) or min(blocks) < 1:
            raise ValueError(f'KPEncoder: channels {channels}, blocks {blocks} and conv_types {conv_types} need one '
                             'entry per stage and blocks >= 1')
        check_norm_momentum(norm_cfg, 'KPEncoder')
        defaults = dict(conv_defaults or {})
        self.in_channels, self.channels = in_channels, channels
        self.out_channels = channels[-1]
        self.num_levels = len(channels)
        common = dict(norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.stages = nn.ModuleList()
        for level, (width, count, conv) in enumerate(zip(channels, blocks, conv_types)):
            cfg = _conv_cfg(conv, defaults, f'conv_types[{level}]')
            radius = conv_radius * first_subsampling_dl * 2 ** level
            stage = nn.ModuleList()
            if level == 0:
                stage.append(SimpleBlock(in_channels, width, _conv_cfg(stem, defaults, 'stem'), radius, **common))
            else:
                stage.append(ResnetBottleneckBlock(channels[level - 1], width, cfg, radius / 2, strided=True,
                                                   ratio=bottleneck_ratio, **common))
            for _ in range(count - 1):
                stage.append(ResnetBottleneckBlock(width, width, cfg, radius, ratio=bottleneck_ratio, **common))
            self.stages.append(stage)

    def forward(self, pyramid):
        """Run the stages on ``pyramid.features``: list of (N_l, channels[l]), one per level.

        Raises:
            ValueError: the pyramid has fewer levels than the encoder.
        """
        if pyramid.num_levels < self.num_levels:
            raise ValueError(f'KPEncoder has {self.num_levels} stages but the pyramid has {pyramid.num_levels} levels '
                             '(set the data preprocessor num_levels)')
        x, feats = pyramid.features, []
        for level, stage in enumerate(self.stages):
            for i, block in enumerate(stage):
                x = block(x, pyramid, level - 1 if (level and i == 0) else level)
            feats.append(x)
        return feats


@MODELS.register_module()
class KPDecoder(nn.Module):
    """KPFCNN decoder: from the coarsest level up, nearest upsampling + skip concatenation + unary.

    Args:
        channels (Sequence[int]): encoder widths per level.
        norm_cfg, act_cfg (dict): of the unary blocks.
    Forward: ``(list of (N_l, channels[l]), KPPyramid) -> (N_0, channels[0])``.
    """

    def __init__(self, channels, norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG):
        super().__init__()
        channels = tuple(channels)
        self.upsample = NearestUpsampleBlock()
        self.unaries = nn.ModuleList(LinearNormAct(channels[l + 1] + channels[l], channels[l], norm_cfg, act_cfg)
                                     for l in range(len(channels) - 1))
        self.out_channels = channels[0]

    def forward(self, feats, pyramid):
        """Upsample from the coarsest level, concatenating skips: (N_0, channels[0])."""
        x = feats[-1]
        for level in range(len(feats) - 2, -1, -1):
            x = self.unaries[level](torch.cat([self.upsample(x, pyramid, level), feats[level]], 1))
        return x

