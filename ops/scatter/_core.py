"""Shared machinery of the torch_scatter-compatible API: argument checks, index broadcasting and the mapping of a
reduction along any ``dim`` onto the ``fsdlite::segment_reduce`` kernel (which reduces rows).

Everything here is TorchScript-compatible, so the public functions built on it can be scripted. Checks that only
matter in eager Python (argument *types*, which TorchScript enforces itself) sit in ``if not
torch.jit.is_scripting()`` blocks; data-dependent checks (index ranges, sortedness) are skipped while
``torch.compile`` traces, where the kernels' own checks still run on the real data.
"""
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _checks
from .._checks import OpTypeError, OpValueError
from ..segment_reduce import SRC_DTYPES  # noqa: F401  (the family module registers the kernel's autograd and fake)


def reductions() -> List[str]:
    """The ``reduce`` values every scatter/segment function accepts."""
    return ['sum', 'add', 'mean', 'min', 'max', 'mul']


def dtype_name(dtype: torch.dtype) -> str:
    """'torch.float32' etc. (TorchScript prints a dtype as its number)."""
    if not torch.jit.is_scripting():
        return str(dtype)
    names = ['torch.float32', 'torch.float64', 'torch.float16', 'torch.bfloat16', 'torch.int64', 'torch.int32',
             'torch.int16', 'torch.int8', 'torch.uint8', 'torch.bool']
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
              torch.int8, torch.uint8, torch.bool]
    for k in range(len(dtypes)):
        if dtype == dtypes[k]:
            return names[k]
    return 'an unsupported dtype (not a real number type)'


def eager_types(op: str, src: Tensor, index: Tensor, index_name: str, dim: int, out: Optional[Tensor],
                dim_size: Optional[int], reduce: str) -> None:
    """Eager-only checks of the argument types (TorchScript checks them at the call)."""
    _checks.tensor(op, 'src', src)
    _checks.tensor(op, index_name, index)
    if out is not None:
        _checks.tensor(op, 'out', out)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise OpTypeError(f'{op}: dim must be an int, got {type(dim).__name__} {dim!r}')
    if dim_size is not None and (isinstance(dim_size, bool) or not isinstance(dim_size, int)):
        raise OpTypeError(f'{op}: dim_size must be an int or None, got {type(dim_size).__name__} {dim_size!r}')
    if not isinstance(reduce, str):
        raise OpTypeError(f'{op}: reduce must be a str, got {type(reduce).__name__} {reduce!r}')


def check_values_now() -> bool:
    """False while torch.compile traces (data-dependent checks would break the graph; the kernels still check)."""
    if not torch.jit.is_scripting():
        return not torch.compiler.is_compiling()
    return True


def check_src(op: str, src: Tensor, reduce: str, floating: bool) -> None:
    """``src``: a supported dtype (floating when ``floating``), at least 1-D; ``reduce`` one of :func:`reductions`."""
    supported = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
                 torch.int8, torch.uint8, torch.bool]
    if src.dtype not in supported:
        raise OpTypeError(f'{op}: src must have one of the dtypes float32, float64, float16, bfloat16, int64, int32, '
                          f'int16, int8, uint8 or bool, got {dtype_name(src.dtype)}')
    if floating and not src.is_floating_point():
        raise OpTypeError(f'{op}: src must be a floating-point tensor, got {dtype_name(src.dtype)}')
    if src.dim() < 1:
        raise OpValueError(f'{op}: src must have at least 1 dimension, got shape {list(src.shape)}')
    if reduce not in reductions():
        raise OpValueError(f"{op}: reduce must be one of {reductions()}, got '{reduce}'")
    if reduce == 'mean' and src.dtype == torch.bool:
        raise OpTypeError(f"{op}: reduce='mean' needs a numeric src, got dtype torch.bool")


def check_index(op: str, name: str, index: Tensor, src: Tensor, min_dim: int) -> None:
    """``index``: int64/int32, on src's device, ``min_dim`` to ``src.dim()`` dimensions."""
    if index.dtype != torch.int64 and index.dtype != torch.int32:
        raise OpTypeError(f'{op}: {name} must have one of the dtypes [torch.int32, torch.int64], got '
                          f'{dtype_name(index.dtype)}')
    if index.device != src.device:
        raise OpValueError(f'{op}: all tensors must be on one device, got src on {src.device}, {name} on '
                           f'{index.device}')
    if index.dim() < min_dim:
        raise OpValueError(f'{op}: {name} must have at least {min_dim} dimensions, got shape {list(index.shape)}')
    if index.dim() > src.dim():
        raise OpValueError(f'{op}: {name} has more dimensions than src (at most src.dim() = {src.dim()}), got '
                           f'{name} shape {list(index.shape)} and src shape {list(src.shape)}')


def normalize_dim(op: str, dim: int, ndim: int) -> int:
    """``dim`` in ``[-ndim, ndim)`` as a non-negative int."""
    if dim < -ndim or dim >= ndim:
        raise OpValueError(f'{op}: dim must be in [{-ndim}, {ndim}) for src with {ndim} dimensions, got {dim}')
    return dim % ndim


def broadcast_index(op: str, name: str, index: Tensor, src: Tensor, dim: int) -> Tensor:
    """torch_scatter's broadcast: a 1-D index runs along ``dim``; a k-D index gains trailing dimensions; then it is
    expanded to ``src.shape`` (a view, no copy)."""
    view = index
    if view.dim() == 1:
        for _ in range(dim):
            view = view.unsqueeze(0)
    while view.dim() < src.dim():
        view = view.unsqueeze(-1)
    for k in range(src.dim()):
        if view.size(k) != src.size(k) and view.size(k) != 1:
            raise OpValueError(f'{op}: {name} of shape {list(index.shape)} does not broadcast to src of shape '
                               f'{list(src.shape)} along dim {dim}')
    return view.expand(src.shape)


def check_sorted(op: str, name: str, index: Tensor) -> None:
    """``index`` must be non-decreasing along its last dimension."""
    d = index.dim() - 1
    n = index.size(d)
    if n > 1:
        drops = index.narrow(d, 1, n - 1) < index.narrow(d, 0, n - 1)
        if bool(drops.any()):
            where: List[int] = drops.nonzero()[0].tolist()
            raise OpValueError(f'{op}: {name} must be sorted (non-decreasing) along its last dimension; it decreases '
                               f'after position {where}')


def check_out(op: str, out: Tensor, src: Tensor, dim: int) -> int:
    """``out`` must match src's dtype, device and shape except along ``dim``; returns ``out.size(dim)``."""
    if out.dtype != src.dtype:
        raise OpTypeError(f'{op}: out must have dtype {dtype_name(src.dtype)} (that of src), got '
                          f'{dtype_name(out.dtype)}')
    if out.device != src.device:
        raise OpValueError(f'{op}: all tensors must be on one device, got src on {src.device}, out on {out.device}')
    bad = out.dim() != src.dim()
    for axis in range(min(out.dim(), src.dim())):
        bad = bad or (axis != dim and out.size(axis) != src.size(axis))
    if bad:
        raise OpValueError(f'{op}: out must have the shape of src except along dim {dim}, got out shape '
                           f'{list(out.shape)} and src shape {list(src.shape)}')
    return out.size(dim)


def row_numel(src: Tensor, dim: int) -> int:
    """Elements of src per position along ``dim``."""
    n = 1
    for k in range(src.dim()):
        if k != dim:
            n = n * src.size(k)
    return n


def output_size(op: str, index: Tensor, src: Tensor, dim: int, dim_size: Optional[int], check: bool) -> int:
    """Number of segments: ``dim_size`` if given, else ``index.max() + 1`` (0 for an empty index); checked to fit in
    int64 together with the other dimensions, and (``check``) against the index values."""
    name = 'dim_size'
    if dim_size is not None:
        if dim_size < 0:
            raise OpValueError(f'{op}: dim_size must be >= 0, got {dim_size}')
        size = dim_size
    else:
        name = 'dim_size (index.max() + 1)'
        size = int(index.max()) + 1 if index.numel() > 0 else 0
    _checks.output_rows(op, name, size, row_numel(src, dim), 'src elements per position along dim')
    if check:
        _checks.index_range(op, 'index', index, 0, size)
    return size


def _layout(index: Tensor, dim: int) -> Tuple[List[int], int, int]:
    """How an index expanded to src's shape maps elements to kernel rows: ``(order, width, varying)``.

    The dimensions other than ``dim`` split into those where the index varies (``varying`` of them, product
    ``width``) and those it is broadcast over. src is viewed as (E * width, *broadcast sizes) rows, element (e, v)
    going to segment ``index[e, v] * width + v``, so the kernel sees the widest possible rows: a 1-D index
    (width 1) reduces (E, *rest) rows directly, and any index works. ``order`` permutes (dim, varying, broadcast).
    """
    moved = index.movedim(dim, 0)
    varying: List[int] = []
    broadcast: List[int] = []
    for k in range(1, moved.dim()):
        # zero-size dimensions count as varying: no element, nothing to broadcast
        if moved.size(k) == 0 or (moved.stride(k) != 0 and moved.size(k) != 1):
            varying.append(k)
        else:
            broadcast.append(k)
    width = 1
    for k in varying:
        width = width * moved.size(k)
    return [0] + varying + broadcast, width, len(varying)


def _inverse(order: List[int]) -> List[int]:
    inverse = [0] * len(order)
    for position, axis in enumerate(order):
        inverse[axis] = position
    return inverse


def _segment_ids(index: Tensor, dim: int, order: List[int], width: int, varying: int) -> Tensor:
    """(E * width,) kernel segment id of each row."""
    picked = index.movedim(dim, 0).permute(order)
    for _ in range(picked.dim() - 1 - varying):
        picked = picked.select(-1, 0)
    offsets = torch.arange(width, device=index.device)
    return (picked.reshape(index.size(dim), width).to(torch.int64) * width + offsets).reshape(-1)


def _restore(t: Tensor, moved: Tensor, dim: int, order: List[int], num_segments: int) -> Tensor:
    """(S * width, *broadcast) kernel output -> src's layout with S along ``dim``; ``moved`` is src with ``dim``
    first."""
    sizes = [num_segments] + [moved.size(k) for k in order[1:]]
    return t.reshape(sizes).permute(_inverse(order)).movedim(0, dim)


def reduce_segments(src: Tensor, index: Tensor, dim: int, num_segments: int,
                    reduce: str) -> Tuple[Tensor, Optional[Tensor]]:
    """Reduce src along ``dim`` into ``num_segments`` segments of an index expanded to src's shape (no checks here:
    the kernel still validates). Returns (values, arg or None); arg is the position along ``dim``
    (``src.size(dim)`` for an empty segment)."""
    order, width, varying = _layout(index, dim)
    ids = _segment_ids(index, dim, order, width, varying)
    moved = src.movedim(dim, 0)
    rows = moved.permute(order)
    rows = rows.reshape([rows.size(0) * width] + list(rows.shape[1 + varying:]))
    kernel_reduce = 'sum' if reduce == 'add' else reduce
    values, arg = torch.ops.fsdlite.segment_reduce(rows, ids, num_segments * width, kernel_reduce)
    values = _restore(values, moved, dim, order, num_segments)
    if reduce != 'max' and reduce != 'min':
        return values, None
    if width > 1:
        arg = torch.div(arg, width, rounding_mode='floor')  # row e * width + v -> e; empty (E * width) -> E
    return values, _restore(arg, moved, dim, order, num_segments)


def segment_counts(index: Tensor, dim: int, num_segments: int, dtype: torch.dtype) -> Tensor:
    """Elements per segment of an expanded index, broadcastable against the reduced output (index_add, not bincount:
    a fixed size that torch.compile can trace)."""
    order, width, varying = _layout(index, dim)
    ids = _segment_ids(index, dim, order, width, varying)
    count = torch.zeros(num_segments * width, dtype=dtype, device=index.device)
    count = count.index_add_(0, ids, torch.ones(ids.shape, dtype=dtype, device=index.device))
    moved = index.movedim(dim, 0)
    sizes = [num_segments] + [moved.size(k) for k in order[1:1 + varying]] + [1] * (len(order) - 1 - varying)
    return count.reshape(sizes).permute(_inverse(order)).movedim(0, dim)


def prepare(op: str, src: Tensor, index: Tensor, dim: int, out: Optional[Tensor], dim_size: Optional[int],
            reduce: str, floating: bool) -> Tuple[Tensor, int, int]:
    """Every check of a scatter call; returns (index expanded to src's shape, dim >= 0, number of segments)."""
    if not torch.jit.is_scripting():
        eager_types(op, src, index, 'index', dim, out, dim_size, reduce)
    check_src(op, src, reduce, floating)
    check_index(op, 'index', index, src, 1)
    dim = normalize_dim(op, dim, src.dim())
    expanded = broadcast_index(op, 'index', index, src, dim)
    if expanded.numel() == 0:  # src has no elements: torch_scatter sizes the output from the expanded index
        index = expanded
    check = check_values_now()
    if out is not None:
        size = check_out(op, out, src, dim)
        if check:
            _checks.index_range(op, 'index', index, 0, size)
    else:
        size = output_size(op, index, src, dim, dim_size, check)
        if not torch.jit.is_scripting():  # a size no allocation can satisfy: say which argument asked for it
            name = 'dim_size' if dim_size is not None else 'dim_size (index.max() + 1)'
            arg_size = 8 if reduce == 'max' or reduce == 'min' else 0
            _checks.output_memory(op, name, size, row_numel(src, dim), 'src elements per position along dim',
                                  src.element_size() + arg_size, src.device)  # (a no-op while compiling)
    return expanded, dim, size


def reduce_into(src: Tensor, index: Tensor, dim: int, size: int, out: Optional[Tensor],
                reduce: str) -> Tuple[Tensor, Optional[Tensor]]:
    """torch_scatter semantics of every reduction with an optional ``out`` that participates (checked arguments).

    Returns ``(values, arg)``; ``values`` is ``out`` itself (updated in place) when ``out`` is given.
    """
    if out is None:
        return reduce_segments(src, index, dim, size, reduce)
    if reduce == 'max' or reduce == 'min':
        values, arg = reduce_segments(src, index, dim, size, reduce)
        assert arg is not None
        better = values > out if reduce == 'max' else values < out
        take = (arg < src.size(dim)) & better  # strict: the pre-filled value wins ties
        out.copy_(torch.where(take, values, out))
        return out, torch.where(take, arg, torch.full_like(arg, src.size(dim)))
    if reduce == 'mul':
        return out.mul_(reduce_segments(src, index, dim, size, 'mul')[0]), None
    out.add_(reduce_segments(src, index, dim, size, 'sum')[0])
    if reduce == 'mean':
        count = segment_counts(index, dim, size, out.dtype).clamp(min=1)
        if out.is_floating_point():
            out.div_(count)
        else:
            out.div_(count, rounding_mode='floor')
    return out, None
