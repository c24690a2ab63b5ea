"""Inference-time folding of an eval-mode BatchNorm into the linear map before it.

``norm(x @ W + b)`` with a BatchNorm in eval mode is the affine map ``x @ (W * s) + (b * s + t)``, where
``s = gamma / sqrt(running_var + eps)`` and ``t = beta - running_mean * s`` (per output channel).  Layers that
end in such a norm (``LinearNormAct``, the sparse-conv blocks ``SparseConvBlock``) run the folded map when
no gradient is needed: one GEMM instead of GEMM + norm, and no extra (N, C) pass.  The folded weights are cached
on the norm module and rebuilt whenever any tensor they come from changes (new storage or an in-place update:
optimizer steps, ``load_state_dict``, ``.to()``).  An edit through ``param.data`` bypasses the version counter
that tells: make such edits on the parameter itself (under ``torch.no_grad()``) or run inside
:func:`layer_by_layer`.  Same values as the unfolded layers up to float rounding.

Folding is off (the layers run module by module) while gradients are enabled, while the norm is in training mode
or has no running statistics, while a graph is exported, and inside :func:`layer_by_layer` -- the block tools use
when they observe layers through their module calls (the slim tracer).
"""
import contextlib
from typing import NamedTuple

import torch
from torch import nn

from fsdlite.structures.bounds import is_exporting

_LAYER_BY_LAYER = []  # non-empty inside layer_by_layer()
_CACHE_ATTR = '_fsdlite_folded_bn'


@contextlib.contextmanager
def layer_by_layer():
    """Inside this block layers run module by module: no BatchNorm folding, and
    ``LinearNormAct.forward_gathered_concat`` builds its concatenation and calls the layer on it (the same values).
    For tools that observe layers through their module calls, e.g. the slim tracer, which must see every linear
    layer and norm read its inputs."""
    _LAYER_BY_LAYER.append(True)
    try:
        yield
    finally:
        _LAYER_BY_LAYER.pop()


def running_layer_by_layer():
    """True inside :func:`layer_by_layer`."""
    return bool(_LAYER_BY_LAYER)


class FoldedAffine(NamedTuple):
    """Result of :func:`fold_batch_norm`."""
    weight: torch.Tensor  #: (..., C_out) contiguous, ``weight * scale``
    bias: torch.Tensor    #: (C_out,) ``bias * scale + shift``


def _is_eval_batch_norm(norm):
    """An eval-mode BatchNorm with running statistics (an affine map)."""
    return (isinstance(norm, nn.modules.batchnorm._BatchNorm) and not norm.training
            and norm.running_mean is not None and norm.running_var is not None)


def batch_norm_affine(norm):
    """``(scale, shift)`` (C,) with ``norm(y) == y * scale + shift`` for an eval-mode BatchNorm with running
    statistics; None for any other module (training mode, no running statistics, not a BatchNorm)."""
    if not _is_eval_batch_norm(norm):
        return None
    scale = torch.rsqrt(norm.running_var + norm.eps)
    if norm.weight is not None:
        scale = scale * norm.weight
    shift = -norm.running_mean * scale
    if norm.bias is not None:
        shift = shift + norm.bias
    return scale, shift


def _versions(tensors):
    """Cache key part of ``tensors``: storage, version counter, dtype and device of each; None when one is an
    inference tensor (no version counter: not cached)."""
    if any(t is not None and t.is_inference() for t in tensors):
        return None
    return tuple(None if t is None else (t.data_ptr(), t._version, t.dtype, t.device) for t in tensors)


def fold_affine(matrices, bias, scale, shift):
    """The linear map ``x @ matrices + bias`` followed by the per-channel affine map ``y * scale + shift`` as one
    linear map: :class:`FoldedAffine` of ``matrices * scale`` (``matrices`` (..., C_out), made contiguous) and
    ``bias * scale + shift`` (``shift`` when ``bias`` is None)."""
    return FoldedAffine((matrices * scale).contiguous(), (shift if bias is None else bias * scale + shift).contiguous())


def fold_batch_norm(norm, weight, bias, weight_out_last, tag):
    """The linear map ``weight``/``bias`` followed by ``norm``, as one affine map (for inference).

    Args:
        norm (nn.Module): the module after the linear map.
        weight (Tensor): the map's parameter (any layout; the cache watches it).
        bias (Tensor | None): (C_out,) its bias.
        weight_out_last (callable): ``weight -> (..., C_out)`` the matrices the caller multiplies by (a view is
            fine: the folded result is made contiguous).
        tag (hashable): the layout ``weight_out_last`` produces (part of the cache key).
    Returns:
        FoldedAffine | None: None when folding is off (see the module docstring); the caller then runs its layers
        unfolded.
    """
    if torch.is_grad_enabled() or _LAYER_BY_LAYER or is_exporting() or not _is_eval_batch_norm(norm):
        return None
    versions = _versions((weight, bias, norm.weight, norm.bias, norm.running_mean, norm.running_var))
    key = None if versions is None else (tag, norm.eps) + versions
    cached = norm.__dict__.get(_CACHE_ATTR)
    if key is not None and cached is not None and cached[0] == key:
        return cached[1]
    folded = fold_affine(weight_out_last(weight), bias, *batch_norm_affine(norm))
    if key is not None:
        norm.__dict__[_CACHE_ATTR] = (key, folded)
    return folded


__all__ = ['layer_by_layer', 'running_layer_by_layer', 'FoldedAffine', 'batch_norm_affine', 'fold_affine',
           'fold_batch_norm']
