"""Composite segment functions of torch_scatter -- scatter_softmax, scatter_log_softmax, scatter_logsumexp and
scatter_std -- written with the segment_reduce kernel and torch.gather (TorchScript-compatible, autograd through the
pieces). The per-segment maximum only shifts values for numerical safety, so it is taken on detached values."""
from typing import Optional

import torch
from torch import Tensor

from ._core import prepare, reduce_segments, segment_counts


def _long(index: Tensor) -> Tensor:
    return index if index.dtype == torch.int64 else index.to(torch.int64)


def _shifted(src: Tensor, index: Tensor, dim: int, size: int) -> Tensor:
    """``src`` minus its segment's maximum (NaN never wins the maximum; a segment of only -inf gives NaN, as
    torch.softmax)."""
    peak = reduce_segments(src.detach(), index, dim, size, 'max')[0]
    return src - peak.gather(dim, _long(index))


def scatter_softmax(src: Tensor, index: Tensor, dim: int = -1, dim_size: Optional[int] = None) -> Tensor:
    """Softmax of the values of each segment (torch_scatter.scatter_softmax).

    Args:
        src (Tensor): (..., E, ...) floating values.
        index (Tensor): int64/int32 segment ids broadcastable to ``src`` (1-D: along ``dim``).
        dim (int): dimension along which segments are formed.
        dim_size (int, optional): number of segments S (default ``index.max() + 1``).
    Returns:
        Tensor: (..., E, ...) ``exp(src) / sum of exp(src) over the segment``.
    """
    index, dim, size = prepare('scatter_softmax', src, index, dim, None, dim_size, 'max', True)
    exp = _shifted(src, index, dim, size).exp()
    total = reduce_segments(exp, index, dim, size, 'sum')[0]
    return exp / total.gather(dim, _long(index))


def scatter_log_softmax(src: Tensor, index: Tensor, dim: int = -1, eps: float = 1e-12,
                        dim_size: Optional[int] = None) -> Tensor:
    """Log-softmax of the values of each segment (torch_scatter.scatter_log_softmax).

    Args:
        src (Tensor): (..., E, ...) floating values.
        index (Tensor): int64/int32 segment ids broadcastable to ``src`` (1-D: along ``dim``).
        dim (int): dimension along which segments are formed.
        eps (float): added to each segment's sum of exponentials before the log.
        dim_size (int, optional): number of segments S (default ``index.max() + 1``).
    Returns:
        Tensor: (..., E, ...) ``src - log(sum of exp(src) over the segment)``.
    """
    index, dim, size = prepare('scatter_log_softmax', src, index, dim, None, dim_size, 'max', True)
    shifted = _shifted(src, index, dim, size)
    total = reduce_segments(shifted.exp(), index, dim, size, 'sum')[0]
    return shifted - (total + eps).log().gather(dim, _long(index))


def scatter_logsumexp(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                      dim_size: Optional[int] = None, eps: float = 1e-12) -> Tensor:
    """``log(sum(exp(src)))`` of each segment (torch_scatter.scatter_logsumexp).

    An empty segment gives 0; a segment holding only -inf gives -inf (torch.logsumexp's value; torch_scatter gives
    0). A given ``out`` takes part as one more term of its segment (an empty segment keeps its value) and receives
    the result.

    Args:
        src (Tensor): (..., E, ...) floating values.
        index (Tensor): int64/int32 segment ids broadcastable to ``src`` (1-D: along ``dim``).
        dim (int): dimension along which segments are formed.
        out (Tensor, optional): (..., S, ...) buffer that participates and receives the result.
        dim_size (int, optional): S when ``out`` is not given (default ``index.max() + 1``).
        eps (float): added to each segment's (shifted) sum of exponentials before the log.
    Returns:
        Tensor: (..., S, ...) values (``out`` when given).
    """
    index, dim, size = prepare('scatter_logsumexp', src, index, dim, out, dim_size, 'max', True)
    peak, arg = reduce_segments(src.detach(), index, dim, size, 'max')
    assert arg is not None
    top = torch.where(arg < src.size(dim), peak, float('-inf'))  # no non-NaN value: -inf
    if out is not None:
        top = torch.maximum(top, out.detach())
    shift = torch.where(torch.isfinite(top), top, 0.0)
    total = reduce_segments((src - shift.gather(dim, _long(index))).exp(), index, dim, size, 'sum')[0]
    if out is not None:
        total = total + (out - shift).exp()
    result = torch.where(total == 0, float('-inf'), (total + eps).log() + shift)  # every term exp(-inf): -inf
    if out is None:
        return torch.where(segment_counts(index, dim, size, src.dtype) == 0, 0.0, result)
    return out.copy_(result)


def scatter_std(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None, unbiased: bool = True) -> Tensor:
    """Standard deviation of each segment (torch_scatter.scatter_std).

    An empty segment gives 0, as does a segment of one value when ``unbiased`` (its divisor n - 1 is raised to 1).
    A given ``out`` is added to the sum of squared deviations (torch_scatter's semantics) and receives the result.
    The gradient of a zero deviation is 0 (torch_scatter's is NaN).

    Args:
        src (Tensor): (..., E, ...) floating values.
        index (Tensor): int64/int32 segment ids broadcastable to ``src`` (1-D: along ``dim``).
        dim (int): dimension along which segments are formed.
        out (Tensor, optional): (..., S, ...) buffer that participates and receives the result.
        dim_size (int, optional): S when ``out`` is not given (default ``index.max() + 1``).
        unbiased (bool): divide by n - 1 (Bessel's correction) instead of n.
    Returns:
        Tensor: (..., S, ...) standard deviations (``out`` when given).
    """
    index, dim, size = prepare('scatter_std', src, index, dim, out, dim_size, 'sum', True)
    count = segment_counts(index, dim, size, src.dtype)
    mean = reduce_segments(src, index, dim, size, 'sum')[0] / count.clamp(min=1)
    deviation = src - mean.gather(dim, _long(index))
    squares = reduce_segments(deviation * deviation, index, dim, size, 'sum')[0]
    if out is not None:
        squares = squares + out
    variance = squares / ((count - 1) if unbiased else count).clamp(min=1)
    zero = variance == 0
    std = torch.where(zero, 0.0, torch.where(zero, 1.0, variance).sqrt())  # sqrt's gradient at 0 would be inf
    if out is None:
        return std
    return out.copy_(std)
