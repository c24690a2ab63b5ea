"""Depthwise and involution kernel-point layers: KPConvD, KPConvX, KPInv (C -> C).

All three compute ``y[q, c] = sum_k D[k, c] * A[q, k, c // G] * sum_j infl(q, j, k) x[j, c]``
through :func:`fsdlite.ops.kp_aggregate` (``impl='fused'``) or its reference (``impl='naive'``):

* KPConvD: learned depthwise weights D (K, C), no A.
* KPConvX: D modulated by kernel attention ``A = sigmoid([GroupNorm_K](MLP(f_q)))`` (M, K, W) from
  the centre feature, MLP = Linear(C, C) + bias -> LeakyReLU -> Linear(C, K W, no bias).
* KPInv: involution; no D, ``A = act([GroupNorm_K](MLP(f_q)))`` with MLP C -> C/r -> K W (no norm in
  the generator unless ``generator_norm`` is given, e.g. the original BatchNorm for ablations) and
  ``weight_act`` none / sigmoid / tanh / softmax (over the K kernel points).

W (``groups``) weights per kernel point, each shared by ``channels_per_group = C / W`` channels
(default: 16 for KPInv as the original point involution, 8 for KPConvX; fewer on narrow layers).
Defaults follow KPConvX: nearest-kernel-point aggregation with linear influence.
"""
import math

import torch
from torch import nn

from fsdlite.registry import MODELS

from ..layers.norm_act import build_norm
from .kp_base import KernelPointLayer, center_features, ops, references, resolve_groups

WEIGHT_ACTS = ('none', 'sigmoid', 'tanh', 'softmax')


def default_channels_per_group(channels, preferred=8):
    """``preferred`` channels per generated weight, halved while that would leave < 2 weights per
    kernel point (or not divide the channels)."""
    cpg = preferred
    while cpg > 1 and (channels % cpg or channels // cpg < 2):
        cpg //= 2
    return cpg


class _KPAggregateLayer(KernelPointLayer):
    """Base: a C -> C layer built on kp_aggregate."""

    #: fsdlite.slim: the depthwise kernel (K, C) of KPConvD / KPConvX carries the channels on dim 1 (traced
    #: through fsdlite.ops.kp_aggregate; the attention / generator layers slim as ordinary Linear layers).
    slim_spec = dict(kind='params', params={'weights': 1})

    def __init__(self, channels=None, in_channels=None, out_channels=None, kernel_size=15, radius=1.0, sigma=None,
                 influence='linear', aggregation='nearest', impl='fused', **kernel_cfg):
        super().__init__(kernel_size, radius, sigma, influence, aggregation, impl=impl, **kernel_cfg)
        sizes = {c for c in (channels, in_channels, out_channels) if c is not None}
        if len(sizes) != 1:
            raise ValueError(f'{type(self).__name__} maps C -> C channels: give channels (or equal in_channels / '
                             f'out_channels), got channels={channels!r}, in_channels={in_channels!r}, '
                             f'out_channels={out_channels!r}')
        self.channels = self.in_channels = self.out_channels = sizes.pop()

    def aggregate(self, q_pts, s_pts, neighbors, x, depthwise=None, gen_weights=None):
        kp = self.kernel(x)
        forms = self.forms()
        if forms == 'fused':
            return ops().kp_aggregate(q_pts, s_pts, neighbors, x, kp, depthwise, gen_weights, **self.geometry())
        return references(forms)[1](q_pts, s_pts, neighbors, x, kp, depthwise, gen_weights, **self.geometry())

    def _depthwise_weights(self):
        bound = 1.0 / math.sqrt(self.kernel_size)
        return nn.Parameter(torch.empty(self.kernel_size, self.channels).uniform_(-bound, bound))

    def _weight_norm(self, enabled, groups):
        if not enabled:
            return nn.Identity()
        if groups < 2:
            raise ValueError(f'{type(self).__name__}: weight_norm normalises the {groups} generated weight(s) of each '
                             'kernel point; it needs groups >= 2 (lower channels_per_group)')
        return nn.GroupNorm(self.kernel_size, self.kernel_size * groups)


@MODELS.register_module()
class KPConvD(_KPAggregateLayer):
    """Depthwise kernel-point convolution with weights (K, C).

    Forward: ``(q_pts (M, 3), s_pts (N, 3), neighbors (M, H), x (N, C)) -> (M, C)``.
    """

    def __init__(self, channels=None, **kwargs):
        super().__init__(channels, **kwargs)
        self.weights = self._depthwise_weights()

    def forward(self, q_pts, s_pts, neighbors, x):
        """Depthwise aggregation with ``weights`` (K, C): (M, C)."""
        return self.aggregate(q_pts, s_pts, neighbors, x, depthwise=self.weights.to(x.dtype))


@MODELS.register_module()
class KPConvX(_KPAggregateLayer):
    """KPConvD whose weights are modulated per query by sigmoid kernel attention.

    Args:
        channels (int): C.
        groups / channels_per_group (int): W attention weights per kernel point, or C / W.
        weight_norm (bool): GroupNorm over each kernel point's generated weights.
        **kwargs: see :class:`KernelPointLayer`.
    Forward: ``(q_pts (M, 3), s_pts (N, 3), neighbors (M, H), x (N, C)) -> (M, C)``.
    """

    def __init__(self, channels=None, groups=None, channels_per_group=None, weight_norm=False, **kwargs):
        super().__init__(channels, **kwargs)
        if groups is None and channels_per_group is None:
            channels_per_group = default_channels_per_group(self.channels)
        self.groups = resolve_groups(self.channels, groups, channels_per_group, 'KPConvX')
        self.weights = self._depthwise_weights()
        c, k = self.channels, self.kernel_size
        self.attention = nn.Sequential(nn.Linear(c, c), nn.LeakyReLU(0.1), nn.Linear(c, k * self.groups, bias=False))
        self.attention_norm = self._weight_norm(weight_norm, self.groups)

    def forward(self, q_pts, s_pts, neighbors, x):
        """Depthwise aggregation modulated by the (M, K, W) sigmoid attention of the centre features: (M, C)."""
        center = center_features(q_pts, s_pts, neighbors, x)
        attention = torch.sigmoid(self.attention_norm(self.attention(center)))
        return self.aggregate(q_pts, s_pts, neighbors, x, depthwise=self.weights.to(x.dtype),
                              gen_weights=attention.view(-1, self.kernel_size, self.groups))


@MODELS.register_module()
class KPInv(_KPAggregateLayer):
    """Kernel-point involution: per-query weights generated from the centre feature.

    Args:
        channels (int): C.
        groups / channels_per_group (int): W generated weights per kernel point, or C / W
            (default 16 channels per weight, the original point involution's group size).
        reduction (int): hidden width of the generator is C / reduction.
        generator_norm (dict, optional): norm inside the generator (None: none, the fixed design;
            ``dict(type='BN1d', momentum=0.98)`` reproduces the original ablation).
        weight_norm (bool): GroupNorm over each kernel point's generated weights.
        weight_act (str): 'none', 'sigmoid', 'tanh' or 'softmax' (over kernel points).
        **kwargs: see :class:`KernelPointLayer`.
    Forward: ``(q_pts (M, 3), s_pts (N, 3), neighbors (M, H), x (N, C)) -> (M, C)``.
    """

    def __init__(self, channels=None, groups=None, channels_per_group=None, reduction=1, generator_norm=None,
                 weight_norm=True, weight_act='sigmoid', **kwargs):
        super().__init__(channels, **kwargs)
        if groups is None and channels_per_group is None:
            channels_per_group = default_channels_per_group(self.channels, preferred=16)
        if weight_act not in WEIGHT_ACTS:
            raise ValueError(f'KPInv: weight_act must be one of {list(WEIGHT_ACTS)}, got {weight_act!r}')
        if not (isinstance(reduction, int) and reduction >= 1 and self.channels // reduction >= 1):
            raise ValueError(f'KPInv: reduction must be an int in [1, {self.channels}], got {reduction!r}')
        self.groups = resolve_groups(self.channels, groups, channels_per_group, 'KPInv')
        self.weight_act = weight_act
        c, k, hidden = self.channels, self.kernel_size, self.channels // reduction
        self.generator = nn.Sequential(nn.Linear(c, hidden, bias=generator_norm is None),
                                       build_norm(generator_norm, hidden), nn.LeakyReLU(0.1),
                                       nn.Linear(hidden, k * self.groups))
        self.weight_norm = self._weight_norm(weight_norm, self.groups)

    def generate(self, center):
        """(M, C) centre features -> (M, K, W) generated weights."""
        w = self.weight_norm(self.generator(center)).view(-1, self.kernel_size, self.groups)
        if self.weight_act == 'sigmoid':
            return torch.sigmoid(w)
        if self.weight_act == 'tanh':
            return torch.tanh(w)
        if self.weight_act == 'softmax':
            return torch.softmax(w, dim=1)
        return w

    def forward(self, q_pts, s_pts, neighbors, x):
        """Aggregation with the (M, K, W) weights :meth:`generate` makes from the centre features: (M, C)."""
        weights = self.generate(center_features(q_pts, s_pts, neighbors, x))
        return self.aggregate(q_pts, s_pts, neighbors, x, gen_weights=weights)
