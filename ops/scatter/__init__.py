"""torch_scatter-compatible API backed by :mod:`fsdlite.ops.segment_reduce` (Python only).

Same signatures and semantics as pytorch_scatter, so code ports by changing one import::

    from fsdlite.ops import scatter, scatter_max, segment_csr   # instead of torch_scatter

* output size along ``dim``: ``dim_size`` or ``index.max() + 1``; an empty segment gives 0 and, for
  max/min, arg ``src.size(dim)``; ties pick the first position; NaN never wins a max/min;
* the index broadcasts as in torch_scatter (a 1-D index runs along ``dim``; ``dim < 0`` allowed);
* a given ``out`` participates for scatter_* / segment_coo (sum adds to it, mean divides the sum
  including it by the count, max/min keep its value unless a source value is strictly better) and is
  overwritten by segment_csr; it is updated in place and returned;
* integer mean is floor division (torch_scatter's scatter_mean; its segment_* kernels truncate);
* differences: indices are validated (negative or out-of-range values raise instead of corrupting
  memory); a segment holding only -inf (max) / +inf (min) returns that value, where torch_scatter
  returns 0; ``reduce='mul'`` is not supported.
"""
import torch

from .. import _checks
from ._core import SCATTER_REDUCTIONS, Segments, broadcast_index, check_out, check_src, normalize_dim, reduce_into


def scatter(src, index, dim=-1, out=None, dim_size=None, reduce='sum'):
    """Reduce ``src`` into segments along ``dim`` (torch_scatter.scatter).

    Args:
        src (Tensor): (..., E, ...) values.
        index (Tensor): int64/int32 segment ids, broadcastable to ``src`` (1-D: length E, along ``dim``).
        dim (int): reduced dimension (negative allowed).
        out (Tensor, optional): (..., S, ...) buffer that participates and receives the result.
        dim_size (int, optional): S when ``out`` is not given (default ``index.max() + 1``).
        reduce (str): 'sum' / 'add', 'mean', 'min' or 'max'.
    Returns:
        Tensor: (..., S, ...) reduced values (``out`` when given).
    """
    return reduce_into('scatter', src, index, dim, out, dim_size, reduce)[0]


def scatter_sum(src, index, dim=-1, out=None, dim_size=None):
    """Segment sums along ``dim``: (..., S, ...); see :func:`scatter`."""
    return reduce_into('scatter_sum', src, index, dim, out, dim_size, 'sum')[0]


def scatter_add(src, index, dim=-1, out=None, dim_size=None):
    """Alias of :func:`scatter_sum`."""
    return reduce_into('scatter_add', src, index, dim, out, dim_size, 'sum')[0]


def scatter_mean(src, index, dim=-1, out=None, dim_size=None):
    """Segment means along ``dim`` (floor division for integers): (..., S, ...); see :func:`scatter`."""
    return reduce_into('scatter_mean', src, index, dim, out, dim_size, 'mean')[0]


def scatter_max(src, index, dim=-1, out=None, dim_size=None):
    """Segment maxima and their positions along ``dim``: ((..., S, ...) values, same-shape int64 arg);
    arg is ``src.size(dim)`` for empty segments (and where a given ``out`` value was kept)."""
    return reduce_into('scatter_max', src, index, dim, out, dim_size, 'max')


def scatter_min(src, index, dim=-1, out=None, dim_size=None):
    """Segment minima and their positions along ``dim``; see :func:`scatter_max`."""
    return reduce_into('scatter_min', src, index, dim, out, dim_size, 'min')


# --------------------------------------------------------------------------------------------- COO
def _check_sorted(op, name, index, dim):
    if index.shape[dim] > 1:
        drops = (index.narrow(dim, 1, index.shape[dim] - 1) < index.narrow(dim, 0, index.shape[dim] - 1))
        if bool(drops.any()):
            where = tuple(int(i) for i in drops.nonzero()[0])
            raise ValueError(f'{op}: {name} must be sorted (non-decreasing) along its last dimension; it '
                             f'decreases after position {where}')


def _coo(op, src, index, out, dim_size, reduce):
    check_src(op, src)
    _checks.tensor(op, 'index', index, dtypes=_checks.INDEX_DTYPES, min_dim=1)
    _checks.same_device(op, src=src, index=index)  # before the sortedness check, which cannot run on 'meta'
    if index.dim() > src.dim():
        raise ValueError(f'{op}: index must have at most src.dim() = {src.dim()} dimensions, got shape '
                         f'{tuple(index.shape)}')
    _check_sorted(op, 'index', index, index.dim() - 1)
    return reduce_into(op, src, index, index.dim() - 1, out, dim_size, reduce)


def segment_coo(src, index, out=None, dim_size=None, reduce='sum'):
    """Reduce ``src`` over a sorted index (torch_scatter.segment_coo).

    Args:
        src (Tensor): (*B, E, ...) values.
        index (Tensor): (*B, E) sorted (non-decreasing along the last dimension) int64 segment ids;
            leading dimensions of size 1 broadcast.
        out (Tensor, optional): (*B, S, ...) buffer that participates and receives the result.
        dim_size (int, optional): S when ``out`` is not given (default ``index.max() + 1``).
        reduce (str): 'sum' / 'add', 'mean', 'min' or 'max'.
    Returns:
        Tensor: (*B, S, ...) reduced values.
    """
    return _coo('segment_coo', src, index, out, dim_size, reduce)[0]


def segment_sum_coo(src, index, out=None, dim_size=None):
    """Sum variant of :func:`segment_coo`."""
    return _coo('segment_sum_coo', src, index, out, dim_size, 'sum')[0]


def segment_mean_coo(src, index, out=None, dim_size=None):
    """Mean variant of :func:`segment_coo`."""
    return _coo('segment_mean_coo', src, index, out, dim_size, 'mean')[0]


def segment_max_coo(src, index, out=None, dim_size=None):
    """Max variant of :func:`segment_coo`: returns (values, arg); arg is E for empty segments."""
    return _coo('segment_max_coo', src, index, out, dim_size, 'max')


def segment_min_coo(src, index, out=None, dim_size=None):
    """Min variant of :func:`segment_coo`: returns (values, arg); arg is E for empty segments."""
    return _coo('segment_min_coo', src, index, out, dim_size, 'min')


# --------------------------------------------------------------------------------------------- CSR
def _csr(op, src, indptr, out, reduce):
    check_src(op, src)
    _checks.choice(op, 'reduce', reduce, SCATTER_REDUCTIONS)
    _checks.tensor(op, 'indptr', indptr, dtypes=_checks.INDEX_DTYPES, min_dim=1)
    _checks.same_device(op, src=src, indptr=indptr)
    dim = indptr.dim() - 1
    if dim >= src.dim():
        raise ValueError(f'{op}: indptr must have at most src.dim() = {src.dim()} dimensions, got shape '
                         f'{tuple(indptr.shape)}')
    try:
        indptr = indptr.expand(*src.shape[:dim], indptr.shape[dim]).long()
    except RuntimeError:
        raise ValueError(f'{op}: indptr of shape {tuple(indptr.shape)} does not match the leading dimensions '
                         f'of src {tuple(src.shape)}') from None
    num_rows, num_segments = src.shape[dim], max(indptr.shape[dim] - 1, 0)
    _check_sorted(op, 'indptr', indptr, dim)
    _checks.index_range(op, 'indptr', indptr, 0, num_rows + 1)
    if out is not None:
        size = check_out(op, out, src, dim)
        if size != num_segments:
            raise ValueError(f'{op}: out.shape[{dim}] must be indptr.shape[-1] - 1 = {num_segments}, got '
                             f'{size}')
    if dim == 0 and num_segments:  # one CSR: reduce the covered rows with repeated segment ids
        start, stop = int(indptr[0]), int(indptr[-1])
        ids = torch.repeat_interleave(torch.arange(num_segments, device=src.device), indptr.diff(),
                                      output_size=stop - start)
        covered = src.narrow(0, start, stop - start)
        values, arg = Segments(covered, broadcast_index(op, ids, covered, 0), 0, num_segments).reduce(covered, reduce)
        if arg is not None:
            arg = torch.where(arg < stop - start, arg + start, torch.full_like(arg, num_rows))
    else:  # batched CSR: segment of each row by binary search; rows outside the offsets go to a dump segment S
        rows = torch.arange(num_rows, device=src.device).expand(*src.shape[:dim], num_rows).contiguous()
        ids = torch.searchsorted(indptr.contiguous(), rows, right=True) - 1 if num_segments else rows * 0
        ids = torch.where((ids < 0) | (ids >= num_segments), torch.full_like(ids, num_segments), ids)
        values, arg = Segments(src, broadcast_index(op, ids, src, dim), dim, num_segments + 1).reduce(src, reduce)
        values = values.narrow(dim, 0, num_segments)
        arg = arg.narrow(dim, 0, num_segments) if arg is not None else None
    if out is not None:
        values = out.copy_(values)
    return values, arg


def segment_csr(src, indptr, out=None, reduce='sum'):
    """Reduce ``src`` over CSR segments (torch_scatter.segment_csr).

    Args:
        src (Tensor): (*B, E, ...) values.
        indptr (Tensor): (*B, S + 1) non-decreasing int64 offsets in [0, E]; segment s holds rows
            ``indptr[s] <= e < indptr[s + 1]`` (rows outside ``[indptr[0], indptr[-1])`` are ignored);
            leading dimensions of size 1 broadcast.
        out (Tensor, optional): (*B, S, ...) buffer that receives (is overwritten by) the result.
        reduce (str): 'sum' / 'add', 'mean', 'min' or 'max'.
    Returns:
        Tensor: (*B, S, ...) reduced values.
    """
    return _csr('segment_csr', src, indptr, out, reduce)[0]


def segment_sum_csr(src, indptr, out=None):
    """Sum variant of :func:`segment_csr`."""
    return _csr('segment_sum_csr', src, indptr, out, 'sum')[0]


def segment_mean_csr(src, indptr, out=None):
    """Mean variant of :func:`segment_csr`."""
    return _csr('segment_mean_csr', src, indptr, out, 'mean')[0]


def segment_max_csr(src, indptr, out=None):
    """Max variant of :func:`segment_csr`: returns (values, arg); arg is E for empty segments."""
    return _csr('segment_max_csr', src, indptr, out, 'max')


def segment_min_csr(src, indptr, out=None):
    """Min variant of :func:`segment_csr`: returns (values, arg); arg is E for empty segments."""
    return _csr('segment_min_csr', src, indptr, out, 'min')


segment_add_csr = segment_sum_csr
segment_add_coo = segment_sum_coo

__all__ = ['scatter', 'scatter_sum', 'scatter_add', 'scatter_mean', 'scatter_max', 'scatter_min',
           'segment_coo', 'segment_sum_coo', 'segment_add_coo', 'segment_mean_coo', 'segment_max_coo',
           'segment_min_coo', 'segment_csr', 'segment_sum_csr', 'segment_add_csr', 'segment_mean_csr',
           'segment_max_csr', 'segment_min_csr']
