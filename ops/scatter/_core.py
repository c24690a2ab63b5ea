"""Shared machinery of the torch_scatter-compatible API: argument checks, index broadcasting and the
mapping of a reduction along any ``dim`` onto :func:`fsdlite.ops.segment_reduce` (which reduces rows)."""
import math

import torch

from .. import _checks
from ..segment_reduce import segment_max, segment_min, segment_reduce

SCATTER_REDUCTIONS = ('sum', 'add', 'mean', 'min', 'max')


def check_src(op, src):
    """``src`` must be a tensor of a dtype segment_reduce supports, with at least one dimension."""
    from ..segment_reduce import SRC_DTYPES
    return _checks.tensor(op, 'src', src, dtypes=SRC_DTYPES, min_dim=1)


def normalize_dim(op, dim, ndim):
    """``dim`` in ``[-ndim, ndim)`` as a non-negative int."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f'{op}: dim must be an int, got {type(dim).__name__} {dim!r}')
    if not -ndim <= dim < ndim:
        raise ValueError(f'{op}: dim must be in [{-ndim}, {ndim}) for src with {ndim} dimensions, got {dim}')
    return dim % ndim


def broadcast_index(op, index, src, dim):
    """torch_scatter's broadcast: a 1-D index runs along ``dim``; a k-D index gains trailing dimensions;
    then it is expanded to ``src.shape`` (a view, no copy)."""
    _checks.tensor(op, 'index', index, dtypes=_checks.INDEX_DTYPES)
    _checks.same_device(op, src=src, index=index)
    if index.dim() > src.dim():
        raise ValueError(f'{op}: index has more dimensions than src: index shape {tuple(index.shape)}, '
                         f'src shape {tuple(src.shape)}')
    view = index
    if view.dim() == 1:
        view = view.view(*([1] * dim), -1)
    view = view.view(*view.shape, *([1] * (src.dim() - view.dim())))
    try:
        return view.expand(src.shape)
    except RuntimeError:
        raise ValueError(f'{op}: index of shape {tuple(index.shape)} does not broadcast to src of shape '
                         f'{tuple(src.shape)} along dim {dim}') from None


def output_size(op, index, dim_size):
    """Number of segments: ``dim_size`` if given, else ``index.max() + 1`` (0 for an empty index)."""
    if dim_size is not None:
        return _checks.positive_int(op, 'dim_size', dim_size, allow_zero=True)
    return int(index.max()) + 1 if index.numel() else 0


def check_out(op, out, src, dim):
    """``out`` must match src's dtype, device and shape except along ``dim``; returns ``out.size(dim)``."""
    _checks.tensor(op, 'out', out, dtype=src.dtype, dim=src.dim())
    _checks.same_device(op, src=src, out=out)
    for axis in range(src.dim()):
        if axis != dim and out.shape[axis] != src.shape[axis]:
            raise ValueError(f'{op}: out must have the shape of src except along dim {dim}, got out shape '
                             f'{tuple(out.shape)} and src shape {tuple(src.shape)}')
    return out.shape[dim]


class Segments:
    """Rows of ``src`` along ``dim`` grouped by a broadcast index into ``num_segments`` segments.

    The other dimensions split into those where the index varies (V, product Rv) and those it is
    broadcast over (B).  ``src`` is viewed as (E * Rv, B) rows -- element (e, v) goes to segment
    ``index[e, v] * Rv + v`` -- so segment_reduce sees the widest possible rows: a 1-D index (Rv = 1)
    reduces (E, *rest) rows directly, and any index works.
    """

    def __init__(self, src, index, dim, num_segments):
        self.dim, self.num_segments = dim, num_segments
        moved = index.movedim(dim, 0)
        rest = range(1, moved.dim())
        # zero-size dimensions count as varying: no element, nothing to broadcast
        self.varying = [k for k in rest if moved.shape[k] == 0 or (moved.stride(k) != 0 and moved.shape[k] != 1)]
        self.broadcast = [k for k in rest if k not in self.varying]
        self.order = [0] + self.varying + self.broadcast
        self.width = math.prod(moved.shape[k] for k in self.varying)
        picked = moved.permute(self.order)[(slice(None),) * (1 + len(self.varying)) + (0,) * len(self.broadcast)]
        offsets = torch.arange(self.width, device=index.device)
        self.ids = (picked.reshape(moved.shape[0], self.width).long() * self.width + offsets).reshape(-1)
        self.sizes = [num_segments] + [moved.shape[k] for k in self.varying + self.broadcast]

    def rows(self, src):
        """(E * Rv, *broadcast sizes) view/copy of ``src``."""
        moved = src.movedim(self.dim, 0).permute(self.order)
        return moved.reshape(moved.shape[0] * self.width, *moved.shape[1 + len(self.varying):])

    def _restore(self, t):
        """(S * Rv, *B) -> the layout of src with S along ``dim``."""
        inverse = sorted(range(len(self.order)), key=self.order.__getitem__)
        return t.reshape(self.sizes).permute(inverse).movedim(0, self.dim)

    def reduce(self, src, reduce):
        """(S-shaped values, arg or None): arg is the position along ``dim`` (``src.size(dim)`` if empty)."""
        rows, segments = self.rows(src), self.num_segments * self.width
        if reduce in ('max', 'min'):
            values, arg = (segment_max if reduce == 'max' else segment_min)(rows, self.ids, segments)
            if self.width > 1:
                arg = arg // self.width  # row e * Rv + v -> e; empty (E * Rv) -> E
            return self._restore(values), self._restore(arg)
        return self._restore(segment_reduce(rows, self.ids, segments, 'sum' if reduce == 'add' else reduce)), None

    def counts(self, dtype):
        """Rows per segment, broadcastable against the output (>= 1 so that it can divide)."""
        count = torch.bincount(self.ids, minlength=self.num_segments * self.width).clamp_(min=1).to(dtype)
        shape = self.sizes[:1 + len(self.varying)] + [1] * len(self.broadcast)
        inverse = sorted(range(len(self.order)), key=self.order.__getitem__)
        return count.reshape(shape).permute(inverse).movedim(0, self.dim)


def reduce_into(op, src, index, dim, out, dim_size, reduce):
    """torch_scatter semantics of sum/mean/max/min with an optional ``out`` that participates.

    Returns ``(values, arg)``; ``values`` is ``out`` itself (updated in place) when ``out`` is given.
    """
    check_src(op, src)
    dim = normalize_dim(op, dim, src.dim())
    _checks.choice(op, 'reduce', reduce, SCATTER_REDUCTIONS)
    expanded = broadcast_index(op, index, src, dim)
    if not expanded.numel():  # src has no elements: torch_scatter sizes the output from the expanded index
        index = expanded
    # max and range check on the index as given: no pass over broadcast copies
    size = check_out(op, out, src, dim) if out is not None else output_size(op, index, dim_size)
    _checks.output_rows(op, 'dim_size' if dim_size is not None or out is not None else 'dim_size (index.max() + 1)',
                        size, math.prod(src.shape[:dim] + src.shape[dim + 1:]), 'src elements per position along dim')
    _checks.index_range(op, 'index', index, 0, size)
    segments = Segments(src, expanded, dim, size)
    if out is None:
        return segments.reduce(src, reduce)
    if reduce in ('max', 'min'):
        values, arg = segments.reduce(src, reduce)
        better = values > out if reduce == 'max' else values < out
        take = (arg < src.shape[dim]) & better  # strict: the pre-filled value wins ties
        out.copy_(torch.where(take, values, out))
        return out, torch.where(take, arg, torch.full_like(arg, src.shape[dim]))
    out.add_(segments.reduce(src, 'sum')[0])
    if reduce == 'mean':
        count = segments.counts(out.dtype)
        if out.is_floating_point():
            out.div_(count)
        else:
            out.div_(count, rounding_mode='floor')
    return out, None
