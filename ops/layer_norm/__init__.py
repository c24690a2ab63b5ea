"""layer_norm_rows: LayerNorm over the channels of (N, C) rows (``torch.nn.functional.layer_norm(x, (C,), w, b,
eps)``), for the many short rows of point and cluster features.

Rows are independent tasks; float32 rows of 8 to 128 channels (multiples of 8) are held in AVX2 registers from
load to store, which beats torch's kernel on short rows (``benchmarks/ops.py --only layer_norm`` compares them;
docs/benchmarks.md). Differentiable in ``x``, ``weight`` and ``bias``; the backward is written with torch ops and
is slower than torch's fused one, so :class:`fsdlite.models.layers.norm_act.RowLayerNorm` uses the op for
inference only.
"""
import torch

from .. import _checks
from .._checks import OpValueError
from ..build import register_autograd


_OP = 'layer_norm_rows'


@_checks.register_fake('fsdlite::layer_norm_rows')
def _layer_norm_rows_fake(x, weight, bias, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output):
    x, weight, _bias, eps = inputs
    ctx.eps = eps
    ctx.save_for_backward(x, weight)


def _backward(ctx, grad_out):
    x, weight = ctx.saved_tensors
    mean = x.mean(dim=1, keepdim=True)
    rstd = torch.rsqrt(x.var(dim=1, unbiased=False, keepdim=True) + ctx.eps)
    xhat = (x - mean) * rstd
    g = grad_out * weight                                   # d loss / d xhat
    grad_x = rstd * (g - g.mean(dim=1, keepdim=True) - xhat * (g * xhat).mean(dim=1, keepdim=True))
    return grad_x, (grad_out * xhat).sum(0), grad_out.sum(0), None


register_autograd('fsdlite::layer_norm_rows', _backward, setup_context=_setup_context)


def layer_norm_rows(x, weight, bias, eps=1e-5):
    """LayerNorm of every row: ``(x - mean) / sqrt(var + eps) * weight + bias`` (biased variance, per row).

    Args:
        x (Tensor): (N, C) float32/float64, C >= 1.
        weight (Tensor): (C,) scale, same dtype and device.
        bias (Tensor): (C,) shift, same dtype and device.
        eps (float): finite and > 0, added to the variance.
    Returns:
        Tensor: (N, C) contiguous.
    """
    _checks.tensor(_OP, 'x', x, dtypes=(torch.float32, torch.float64), dim=2)
    if x.shape[1] < 1:
        raise OpValueError(f'{_OP}: x must have at least one channel, got shape {tuple(x.shape)}')
    for name, value in (('weight', weight), ('bias', bias)):
        _checks.tensor(_OP, name, value, dtype=x.dtype, dim=1, size={0: (x.shape[1], 'x.shape[1] (C)')})
    _checks.same_device(_OP, x=x, weight=weight, bias=bias)
    eps = _checks.finite_positive(_OP, 'eps', eps)
    return torch.ops.fsdlite.layer_norm_rows(x, weight, bias, eps)


__all__ = ['layer_norm_rows']
