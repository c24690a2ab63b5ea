"""gather_coo / gather_csr: torch_scatter's inverse of segment_coo / segment_csr (TorchScript-compatible).

Both are one ``torch.gather`` (its backward is the matching segment sum); no kernel of their own.
"""
from typing import List, Optional

import torch
from torch import Tensor

from .. import _checks
from .._checks import OpValueError
from ._core import check_sorted, check_src, check_values_now, eager_types
from ._segment import expand_ids, positions_to_segments


def _gathered(op: str, src: Tensor, ids: Tensor, dim: int, out: Optional[Tensor]) -> Tensor:
    """``src.gather(dim, ids)`` with ids (*B, L) broadcast over src's trailing dimensions, into ``out`` if given."""
    sizes: List[int] = list(src.shape)
    sizes[dim] = ids.size(dim)
    view = ids
    while view.dim() < src.dim():
        view = view.unsqueeze(-1)
    result = src.gather(dim, view.to(torch.int64).expand(sizes))
    if out is None:
        return result
    if out.dtype != src.dtype or out.device != src.device or list(out.shape) != sizes:
        raise OpValueError(f'{op}: out must have dtype {src.dtype}, device {src.device} and shape {sizes}, got '
                           f'{out.dtype}, {out.device} and {list(out.shape)}')
    return out.copy_(result)


def gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Gather ``src`` rows back to the elements of a sorted COO index (torch_scatter.gather_coo): the inverse
    broadcast of :func:`segment_coo`, ``out[..., e, ...] = src[..., index[..., e], ...]``.

    Args:
        src (Tensor): (*B, S, ...) per-segment values.
        index (Tensor): (*B, E) int64/int32 segment ids in ``[0, S)``, usually sorted (any order works);
            leading dimensions of size 1 broadcast.
        out (Tensor, optional): (*B, E, ...) buffer that receives the result.
    Returns:
        Tensor: (*B, E, ...) gathered values.
    """
    op = 'gather_coo'
    if not torch.jit.is_scripting():
        eager_types(op, src, index, 'index', 0, out, None, 'sum')
    check_src(op, src, 'sum', False)
    ids, dim = expand_ids(op, 'index', index, src)
    if check_values_now():  # any order works (sorted or not)
        _checks.index_range(op, 'index', index, 0, src.size(dim))
    return _gathered(op, src, ids, dim, out)


def gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """Gather ``src`` rows back to the elements of CSR segments (torch_scatter.gather_csr): the inverse broadcast of
    :func:`segment_csr`, ``out[..., e, ...] = src[..., s, ...]`` for ``indptr[s] <= e < indptr[s + 1]`` (0 outside
    ``[indptr[0], indptr[-1])``).

    Args:
        src (Tensor): (*B, S, ...) per-segment values.
        indptr (Tensor): (*B, S + 1) non-decreasing int64/int32 offsets (leading dimensions of size 1 broadcast).
        out (Tensor, optional): (*B, E, ...) buffer that receives the result; without it E is the last offset
            (``indptr.flatten()[-1]``, a host sync: pass ``out`` under ``torch.compile``).
    Returns:
        Tensor: (*B, E, ...) gathered values.
    """
    op = 'gather_csr'
    if not torch.jit.is_scripting():
        eager_types(op, src, indptr, 'indptr', 0, out, None, 'sum')
    check_src(op, src, 'sum', False)
    ptr, dim = expand_ids(op, 'indptr', indptr, src)
    num_segments = max(indptr.size(dim) - 1, 0)
    if src.size(dim) != num_segments:
        raise OpValueError(f'{op}: src.shape[{dim}] must be indptr.shape[-1] - 1 = {num_segments} (one row per '
                           f'segment), got src shape {list(src.shape)}')
    if out is not None:
        length = out.size(dim) if out.dim() > dim else 0
    else:
        length = int(ptr.flatten()[-1]) if ptr.numel() > 0 else 0
    if check_values_now():
        check_sorted(op, 'indptr', ptr)
        _checks.index_range(op, 'indptr', ptr, 0, length + 1)
    ids = positions_to_segments(ptr, length, num_segments)  # positions outside the segments -> an appended zero row
    padded = torch.cat([src, src.new_zeros([1 if k == dim else src.size(k) for k in range(src.dim())])], dim)
    return _gathered(op, padded, ids, dim, out)
