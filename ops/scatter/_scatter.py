"""scatter / scatter_{sum, add, mean, mul, min, max}: torch_scatter's scatter functions (TorchScript-compatible)."""
from typing import Optional, Tuple

from torch import Tensor

from ._core import prepare, reduce_into


def scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
            reduce: str = 'sum') -> Tensor:
    """Reduce ``src`` into segments along ``dim`` (torch_scatter.scatter).

    Args:
        src (Tensor): (..., E, ...) values.
        index (Tensor): int64/int32 segment ids, broadcastable to ``src`` (1-D: length E, along ``dim``).
        dim (int): reduced dimension (negative allowed).
        out (Tensor, optional): (..., S, ...) buffer that participates and receives the result.
        dim_size (int, optional): S when ``out`` is not given (default ``index.max() + 1``).
        reduce (str): 'sum' / 'add', 'mean', 'mul', 'min' or 'max'.
    Returns:
        Tensor: (..., S, ...) reduced values (``out`` when given).
    """
    index, dim, size = prepare('scatter', src, index, dim, out, dim_size, reduce, False)
    return reduce_into(src, index, dim, size, out, reduce)[0]


def scatter_sum(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Segment sums along ``dim``: (..., S, ...); see :func:`scatter`."""
    index, dim, size = prepare('scatter_sum', src, index, dim, out, dim_size, 'sum', False)
    return reduce_into(src, index, dim, size, out, 'sum')[0]


def scatter_add(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Alias of :func:`scatter_sum`."""
    index, dim, size = prepare('scatter_add', src, index, dim, out, dim_size, 'sum', False)
    return reduce_into(src, index, dim, size, out, 'sum')[0]


def scatter_mean(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None) -> Tensor:
    """Segment means along ``dim`` (floor division for integers): (..., S, ...); see :func:`scatter`."""
    index, dim, size = prepare('scatter_mean', src, index, dim, out, dim_size, 'mean', False)
    return reduce_into(src, index, dim, size, out, 'mean')[0]


def scatter_mul(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tensor:
    """Segment products along ``dim`` (1 for an empty segment; a given ``out`` is multiplied by them):
    (..., S, ...); see :func:`scatter`."""
    index, dim, size = prepare('scatter_mul', src, index, dim, out, dim_size, 'mul', False)
    return reduce_into(src, index, dim, size, out, 'mul')[0]


def scatter_max(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Segment maxima and their positions along ``dim``: ((..., S, ...) values, same-shape int64 arg);
    arg is ``src.size(dim)`` for empty segments (and where a given ``out`` value was kept)."""
    index, dim, size = prepare('scatter_max', src, index, dim, out, dim_size, 'max', False)
    values, arg = reduce_into(src, index, dim, size, out, 'max')
    assert arg is not None
    return values, arg


def scatter_min(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
                dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Segment minima and their positions along ``dim``; see :func:`scatter_max`."""
    index, dim, size = prepare('scatter_min', src, index, dim, out, dim_size, 'min', False)
    values, arg = reduce_into(src, index, dim, size, out, 'min')
    assert arg is not None
    return values, arg
