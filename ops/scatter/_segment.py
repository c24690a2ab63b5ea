"""segment_coo / segment_csr and their named variants: torch_scatter's segment functions (TorchScript-compatible)."""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _checks
from .._checks import OpValueError
from ._core import (broadcast_index, check_index, check_out, check_sorted, check_src, check_values_now, eager_types,
                    prepare, reduce_into, reduce_segments)


# --------------------------------------------------------------------------------------------- COO
def _coo(op: str, src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int],
         reduce: str) -> Tuple[Tensor, Optional[Tensor]]:
    if not torch.jit.is_scripting():
        eager_types(op, src, index, 'index', 0, out, dim_size, reduce)
    check_src(op, src, reduce, False)
    check_index(op, 'index', index, src, 1)  # devices before the sortedness check, which cannot run on 'meta'
    if check_values_now():
        check_sorted(op, 'index', index)
    expanded, dim, size = prepare(op, src, index, index.dim() - 1, out, dim_size, reduce, False)
    return reduce_into(src, expanded, dim, size, out, reduce)


def segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None, dim_size: Optional[int] = None,
                reduce: str = 'sum') -> Tensor:
    """Reduce ``src`` over a sorted index (torch_scatter.segment_coo).

    Args:
        src (Tensor): (*B, E, ...) values.
        index (Tensor): (*B, E) sorted (non-decreasing along the last dimension) int64/int32 segment ids;
            leading dimensions of size 1 broadcast.
        out (Tensor, optional): (*B, S, ...) buffer that participates and receives the result.
        dim_size (int, optional): S when ``out`` is not given (default ``index.max() + 1``).
        reduce (str): 'sum' / 'add', 'mean', 'mul', 'min' or 'max'.
    Returns:
        Tensor: (*B, S, ...) reduced values.
    """
    return _coo('segment_coo', src, index, out, dim_size, reduce)[0]


def segment_sum_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    """Sum variant of :func:`segment_coo`."""
    return _coo('segment_sum_coo', src, index, out, dim_size, 'sum')[0]


def segment_add_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tensor:
    """Alias of :func:`segment_sum_coo`."""
    return _coo('segment_add_coo', src, index, out, dim_size, 'sum')[0]


def segment_mean_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                     dim_size: Optional[int] = None) -> Tensor:
    """Mean variant of :func:`segment_coo`."""
    return _coo('segment_mean_coo', src, index, out, dim_size, 'mean')[0]


def segment_max_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Max variant of :func:`segment_coo`: returns (values, arg); arg is E for empty segments."""
    values, arg = _coo('segment_max_coo', src, index, out, dim_size, 'max')
    assert arg is not None
    return values, arg


def segment_min_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                    dim_size: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """Min variant of :func:`segment_coo`: returns (values, arg); arg is E for empty segments."""
    values, arg = _coo('segment_min_coo', src, index, out, dim_size, 'min')
    assert arg is not None
    return values, arg


# --------------------------------------------------------------------------------------------- CSR
def expand_ids(op: str, name: str, ids: Tensor, src: Tensor) -> Tuple[Tensor, int]:
    """Checks segment ids or offsets ``ids`` (``index`` / ``indptr``) against src (dtype, device, dimensions;
    leading dimensions equal or 1) and returns them as int64 expanded to src's leading dimensions, with the
    segment dimension ``ids.dim() - 1``."""
    check_index(op, name, ids, src, 1)
    dim = ids.dim() - 1
    for k in range(dim):
        if ids.size(k) != src.size(k) and ids.size(k) != 1:
            raise OpValueError(f'{op}: {name} of shape {list(ids.shape)} does not match the leading dimensions '
                               f'of src {list(src.shape)}')
    lead: List[int] = list(src.shape[:dim])
    return ids.expand(lead + [ids.size(dim)]).to(torch.int64), dim


def positions_to_segments(indptr: Tensor, length: int, num_segments: int) -> Tensor:
    """(*B, length) segment of each position ``e`` along the last dimension: ``s`` with
    ``indptr[s] <= e < indptr[s + 1]``, or ``num_segments`` (a dump segment) outside ``[indptr[0], indptr[-1])``.

    Counts the offsets at or below each position (a scatter_add and a cumsum: O(E + S), fixed shapes)."""
    d = indptr.dim() - 1
    shape = list(indptr.shape)
    shape[d] = length
    if indptr.size(d) == 0:
        return torch.full(shape, num_segments, dtype=torch.int64, device=indptr.device)
    shape[d] = length + 1
    ends = indptr.narrow(d, 1, num_segments)
    marks = torch.zeros(shape, dtype=torch.int64, device=indptr.device).scatter_add_(d, ends, torch.ones_like(ends))
    ids = marks.cumsum(d).narrow(d, 0, length)
    before = torch.arange(length, device=indptr.device) < indptr.narrow(d, 0, 1)
    return torch.where(before, num_segments, ids)


def _csr(op: str, src: Tensor, indptr: Tensor, out: Optional[Tensor],
         reduce: str) -> Tuple[Tensor, Optional[Tensor]]:
    if not torch.jit.is_scripting():
        eager_types(op, src, indptr, 'indptr', 0, out, None, reduce)
    check_src(op, src, reduce, False)
    ptr, dim = expand_ids(op, 'indptr', indptr, src)
    num_rows, num_segments = src.size(dim), max(indptr.size(dim) - 1, 0)
    if check_values_now():
        check_sorted(op, 'indptr', ptr)
        _checks.index_range(op, 'indptr', ptr, 0, num_rows + 1)
    if out is not None:
        size = check_out(op, out, src, dim)
        if size != num_segments:
            raise OpValueError(f'{op}: out.shape[{dim}] must be indptr.shape[-1] - 1 = {num_segments}, got {size}')
    ids = broadcast_index(op, 'indptr', positions_to_segments(ptr, num_rows, num_segments), src, dim)
    values, arg = reduce_segments(src, ids, dim, num_segments + 1, reduce)  # + the dump segment, dropped here
    values = values.narrow(dim, 0, num_segments)
    if arg is not None:
        arg = arg.narrow(dim, 0, num_segments)
    if out is not None:
        values = out.copy_(values)
    return values, arg


def segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None, reduce: str = 'sum') -> Tensor:
    """Reduce ``src`` over CSR segments (torch_scatter.segment_csr).

    Args:
        src (Tensor): (*B, E, ...) values.
        indptr (Tensor): (*B, S + 1) non-decreasing int64/int32 offsets in [0, E]; segment s holds rows
            ``indptr[s] <= e < indptr[s + 1]`` (rows outside ``[indptr[0], indptr[-1])`` are ignored);
            leading dimensions of size 1 broadcast.
        out (Tensor, optional): (*B, S, ...) buffer that receives (is overwritten by) the result.
        reduce (str): 'sum' / 'add', 'mean', 'mul', 'min' or 'max'.
    Returns:
        Tensor: (*B, S, ...) reduced values.
    """
    return _csr('segment_csr', src, indptr, out, reduce)[0]


def segment_sum_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Sum variant of :func:`segment_csr`."""
    return _csr('segment_sum_csr', src, indptr, out, 'sum')[0]


def segment_add_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Alias of :func:`segment_sum_csr`."""
    return _csr('segment_add_csr', src, indptr, out, 'sum')[0]


def segment_mean_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Mean variant of :func:`segment_csr`."""
    return _csr('segment_mean_csr', src, indptr, out, 'mean')[0]


def segment_max_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Max variant of :func:`segment_csr`: returns (values, arg); arg is E for empty segments."""
    values, arg = _csr('segment_max_csr', src, indptr, out, 'max')
    assert arg is not None
    return values, arg


def segment_min_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Min variant of :func:`segment_csr`: returns (values, arg); arg is E for empty segments."""
    values, arg = _csr('segment_min_csr', src, indptr, out, 'min')
    assert arg is not None
    return values, arg
