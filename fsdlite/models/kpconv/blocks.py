"""KPConv network blocks operating on a :class:`~fsdlite.models.kpconv.pyramid.KPPyramid`.

* :class:`SimpleBlock`: kernel-point conv -> norm -> LeakyReLU (the stem).
* :class:`ResnetBottleneckBlock`: unary C_in -> C/4, conv C/4 -> C/4, norm + act, unary C/4 -> C (no act),
  plus a shortcut (neighbourhood max-pool when strided, unary when the widths differ), then LeakyReLU.
  Strided blocks read level l and write level l + 1 (queries = next level, neighbours = ``pools[l]``).
* :class:`NearestUpsampleBlock`: copy each fine point's feature from its closest coarse point.
* :class:`GlobalAverageBlock`: per-sample mean of the last level.

Convolutions are any registered kernel-point layer (``KPConv``, ``KPConvD``, ``KPConvX``, ``KPInv``)
built with the level's radius; depthwise layers need equal widths, so a non-KPConv stem raises.
"""
import copy

import torch
from torch import nn

from ..layers.builder import build_module
from ..layers.mlp import LinearNormAct
from ..layers.norm_act import build_act, build_norm
from .kp_base import nearest_upsample, neighbor_max_pool

DEFAULT_NORM_CFG = dict(type='BN1d', momentum=0.05)
DEFAULT_ACT_CFG = dict(type='LeakyReLU', negative_slope=0.1)


def build_conv(conv_cfg, in_channels, out_channels, radius):
    """Build a kernel-point layer from ``conv_cfg`` (dict with ``type``) for one level."""
    cfg = copy.deepcopy(dict(conv_cfg))
    return build_module(cfg, in_channels=in_channels, out_channels=out_channels, radius=radius)


def level_geometry(pyramid, level, strided):
    """(queries, supports, neighbours) of a conv at ``level`` (strided: next level's points)."""
    if strided:
        return pyramid.points[level + 1], pyramid.points[level], pyramid.pools[level]
    return pyramid.points[level], pyramid.points[level], pyramid.neighbors[level]


class SimpleBlock(nn.Module):
    """conv(in -> out) -> norm -> act at one level.  Forward: ``(x (N_l, C_in), pyramid, level) -> (N_l, C_out)``."""

    def __init__(self, in_channels, out_channels, conv_cfg, radius, norm_cfg=DEFAULT_NORM_CFG,
                 act_cfg=DEFAULT_ACT_CFG):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.conv = build_conv(conv_cfg, in_channels, out_channels, radius)
        self.norm = build_norm(norm_cfg, out_channels)
        self.act = build_act(act_cfg)

    def forward(self, x, pyramid, level):
        """conv -> norm -> act at ``level``: (N_l, C_in) -> (N_l, C_out)."""
        return self.act(self.norm(self.conv(*level_geometry(pyramid, level, False), x)))


class ResnetBottleneckBlock(nn.Module):
    """KPConv's ResNet bottleneck block (plain or strided).

    Args:
        in_channels, out_channels (int): widths.
        conv_cfg (dict): kernel-point layer config (its width is ``out_channels // ratio``).
        radius (float): conv radius at this level.
        strided (bool): read level l, write level l + 1 (max-pool shortcut).
        ratio (int): bottleneck reduction.
    Forward: ``(x (N_l, C_in), pyramid, level) -> (N_l or N_{l+1}, C_out)``.
    """

    def __init__(self, in_channels, out_channels, conv_cfg, radius, strided=False, ratio=4,
                 norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG):
        super().__init__()
        mid = max(out_channels // ratio, 1)
        self.in_channels, self.out_channels, self.strided = in_channels, out_channels, strided
        self.unary1 = LinearNormAct(in_channels, mid, norm_cfg, act_cfg) if in_channels != mid else nn.Identity()
        self.conv = build_conv(conv_cfg, mid, mid, radius)
        self.norm_act = nn.Sequential(build_norm(norm_cfg, mid), build_act(act_cfg))
        self.unary2 = LinearNormAct(mid, out_channels, norm_cfg, None)
        self.shortcut = LinearNormAct(in_channels, out_channels, norm_cfg, None) \
            if in_channels != out_channels else nn.Identity()
        self.act = build_act(act_cfg)

    def forward(self, x, pyramid, level):
        """Bottleneck branch plus shortcut, then act: (N_l, C_in) -> (N_l or N_{l+1}, C_out)."""
        q_pts, s_pts, neighbors = level_geometry(pyramid, level, self.strided)
        y = self.norm_act(self.conv(q_pts, s_pts, neighbors, self.unary1(x)))
        y = self.unary2(y)
        shortcut = neighbor_max_pool(x, neighbors) if self.strided else x
        return self.act(y + self.shortcut(shortcut))


class NearestUpsampleBlock(nn.Module):
    """Level l + 1 features -> level l (closest coarse point; zeros if none within the radius)."""

    def forward(self, x, pyramid, level):
        """(N_{l+1}, C) -> (N_l, C) through ``pyramid.upsamples[level]``."""
        return nearest_upsample(x, pyramid.upsamples[level])


class GlobalAverageBlock(nn.Module):
    """(N_l, C) features of one level -> (B, C) per-sample means (empty samples -> 0)."""

    def forward(self, x, pyramid, level):
        """(N_l, C) -> (B, C) means over ``pyramid.batch[level]``."""
        batch = pyramid.batch[level]
        out = x.new_zeros((pyramid.batch_size, x.shape[1])).index_add_(0, batch, x)
        count = torch.bincount(batch, minlength=pyramid.batch_size).clamp(min=1)
        return out / count[:, None].to(x.dtype)
