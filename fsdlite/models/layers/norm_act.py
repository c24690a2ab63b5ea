"""Norm and activation builders shared by every fsdlite layer.

Thin wrappers over :mod:`mmcv.cnn` that copy the config (never mutate a caller's dict)
and accept ``None`` for "no layer".  Defaults follow FSD: ``BN1d(eps=1e-3, momentum=0.01)``
and ``ReLU``.
"""
import copy

from mmcv.cnn import build_activation_layer, build_norm_layer
from torch import nn

DEFAULT_NORM_CFG = dict(type='BN1d', eps=1e-3, momentum=0.01)
DEFAULT_ACT_CFG = dict(type='ReLU', inplace=True)


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
    return build_norm_layer(copy.deepcopy(dict(cfg)), int(num_features))[1]


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
