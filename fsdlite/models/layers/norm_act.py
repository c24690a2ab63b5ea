"""Norm and activation builders shared by every fsdlite layer.

Thin wrappers over :mod:`mmcv.cnn` that copy the config (never mutate a caller's dict)
and accept ``None`` for "no layer".  Defaults follow FSD: ``BN1d(eps=1e-3, momentum=0.01)``
and ``ReLU``.  ``LN`` builds a :class:`RowLayerNorm`.
"""
import copy

import torch
from mmcv.cnn import build_activation_layer, build_norm_layer
from torch import nn

from fsdlite.ops import layer_norm_rows

from ...structures.bounds import is_exporting

DEFAULT_NORM_CFG = dict(type='BN1d', eps=1e-3, momentum=0.01)
DEFAULT_ACT_CFG = dict(type='ReLU', inplace=True)


class RowLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` whose CPU inference on (N, C) rows runs ``fsdlite.ops.layer_norm_rows``.

    Point and cluster features are many short rows, where torch's LayerNorm kernel spends most of its time per
    row (docs/benchmarks.md). Same parameters, state dict and results (to float rounding) as ``nn.LayerNorm``.
    Everything else takes ``nn.LayerNorm``'s path: autograd (torch's fused backward is faster than the op's, which
    is written with torch ops), other devices or ranks, half precision, no
    affine parameters, and tracing / exporting (the exported graph keeps the standard LayerNormalization).
    Shapes: (N, C) -> (N, C), or ``nn.LayerNorm``'s.
    """

    def forward(self, x):
        """See the class docstring."""
        if (not torch.is_grad_enabled() and x.dim() == 2 and x.device.type == 'cpu'
                and x.dtype in (torch.float32, torch.float64)
                and self.bias is not None and self.weight.dtype == x.dtype
                and self.normalized_shape == (x.shape[1],) and not is_exporting()):
            return layer_norm_rows(x, self.weight, self.bias, self.eps)
        return super().forward(x)


def build_norm(cfg, num_features):
    """Build a norm layer for ``num_features`` channels from ``cfg`` (``None`` -> ``nn.Identity``).

    Args:
        cfg (dict | None): mmcv norm config, e.g. ``dict(type='BN1d', eps=1e-3)`` or ``dict(type='LN')``.
        num_features (int): channels C of the (N, C) input.
    Returns:
        nn.Module
    """
    if cfg is None:
        return nn.Identity()
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'norm_cfg must be a dict with a "type" key or None, got {cfg!r}')
    layer = build_norm_layer(copy.deepcopy(dict(cfg)), int(num_features))[1]
    if type(layer) is nn.LayerNorm:  # mmcv's LN: same module, the row kernel's forward
        layer.__class__ = RowLayerNorm
    return layer


def build_act(cfg):
    """Build an activation layer from ``cfg`` (``None`` -> ``nn.Identity``).

    Args:
        cfg (dict | None): mmcv activation config, e.g. ``dict(type='ReLU')`` or ``dict(type='GELU')``.
    Returns:
        nn.Module
    """
    if cfg is None:
        return nn.Identity()
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'act_cfg must be a dict with a "type" key or None, got {cfg!r}')
    return build_activation_layer(copy.deepcopy(dict(cfg)))


def norm_has_bias(cfg):
    """True when a norm of this config has its own shift (so the preceding layer needs no bias)."""
    return cfg is not None
