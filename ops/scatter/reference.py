"""Pure-torch reference of the torch_scatter-compatible API (torch.scatter_add_ / scatter_reduce and explicit loops;
independent of segment_reduce), for tests and benchmarks. Never modifies a given ``out``."""
import torch

_SMALL = (torch.int8, torch.int16, torch.uint8, torch.bool)


def _broadcast(index, src, dim):
    if index.dim() == 1:
        index = index.view(*([1] * dim), -1)
    return index.view(*index.shape, *([1] * (src.dim() - index.dim()))).expand(src.shape).long()


def _size(src, index, dim, out, dim_size):
    size = list(src.shape)
    if out is not None:
        size[dim] = out.shape[dim]
    else:
        size[dim] = dim_size if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
    return size


def scatter_reference(src, index, dim=-1, out=None, dim_size=None, reduce='sum'):
    """torch_scatter.scatter semantics; returns ``(values, arg)`` (arg None for sum/mean/mul).

    max/min: NaN never wins, ties pick the first position, empty segments give 0 and arg ``src.size(dim)``;
    a given ``out`` keeps its value unless a source value is strictly better. Sums and products of int8/int16/uint8/
    bool accumulate in int64 and are cast back (wrapping as torch; a bool sum is 'any', a bool product 'all').
    """
    dim = dim % src.dim()
    index = _broadcast(index, src, dim)
    size = _size(src, index, dim, out, dim_size)
    if src.dtype in _SMALL:
        wide, arg = scatter_reference(src.long(), index, dim, out.long() if out is not None else None, size[dim],
                                      reduce)
        return (wide != 0 if src.dtype == torch.bool else wide.to(src.dtype)), arg
    if reduce == 'mul':
        return (out.clone() if out is not None else src.new_ones(size)).scatter_reduce_(dim, index, src, 'prod'), None
    if reduce in ('sum', 'add', 'mean'):
        total = (out.clone() if out is not None else src.new_zeros(size)).scatter_add_(dim, index, src)
        if reduce != 'mean':
            return total, None
        count = src.new_zeros(size, dtype=torch.long).scatter_add_(dim, index, torch.ones_like(index))
        count = count.clamp_(min=1).to(total.dtype)
        return (total / count if total.is_floating_point() else total.div(count, rounding_mode='floor')), None
    n = src.shape[dim]
    valid = ~torch.isnan(src) if src.is_floating_point() else torch.ones_like(src, dtype=torch.bool)
    fill = float('-inf') if reduce == 'max' else float('inf')
    if not src.is_floating_point():
        info = torch.iinfo(src.dtype)
        fill = info.min if reduce == 'max' else info.max
    values = torch.where(valid, src, torch.full_like(src, fill))
    best = src.new_full(size, fill).scatter_reduce(dim, index, values, 'amax' if reduce == 'max' else 'amin')
    positions = torch.arange(n, device=src.device).view(-1, *([1] * (src.dim() - dim - 1)))
    positions = positions.expand(src.shape)
    winner = valid & (values == best.gather(dim, index))
    arg = torch.full(size, n, dtype=torch.long, device=src.device).scatter_reduce(
        dim, index, torch.where(winner, positions, torch.full_like(positions, n)), 'amin')
    if out is None:
        return torch.where(arg < n, best, torch.zeros_like(best)), arg
    better = best > out if reduce == 'max' else best < out
    take = (arg < n) & better
    return torch.where(take, best, out), torch.where(take, arg, torch.full_like(arg, n))


def segment_csr_reference(src, indptr, reduce='sum'):
    """torch_scatter.segment_csr semantics by an explicit loop over segments (small inputs only);
    returns ``(values, arg)`` with arg None for sum/mean/mul."""
    dim = indptr.dim() - 1
    indptr = indptr.expand(*src.shape[:dim], indptr.shape[-1])
    num_segments = max(indptr.shape[-1] - 1, 0)
    shape = list(src.shape)
    shape[dim] = num_segments
    values = src.new_zeros(shape)
    arg = torch.full(shape, src.shape[dim], dtype=torch.long) if reduce in ('max', 'min') else None
    for lead in _leading(src, dim):
        ptr = indptr[tuple(lead)].tolist()
        for s in range(num_segments):
            rows = src[tuple(lead)].narrow(0, ptr[s], ptr[s + 1] - ptr[s])
            index = torch.zeros(rows.shape[0], dtype=torch.long)
            seg, seg_arg = scatter_reference(rows, index, 0, dim_size=1, reduce=reduce)
            values[tuple(lead)][s] = seg[0]
            if arg is not None:
                arg[tuple(lead)][s] = torch.where(seg_arg[0] < rows.shape[0], seg_arg[0] + ptr[s],
                                                  torch.full_like(seg_arg[0], src.shape[dim]))
    return values, arg


def _leading(src, dim):
    """Every index tuple over src's first ``dim`` dimensions (``[[]]`` for dim 0)."""
    if not dim:
        return [[]]
    return torch.cartesian_prod(*[torch.arange(s) for s in src.shape[:dim]]).view(-1, dim).tolist()


def gather_coo_reference(src, index):
    """torch_scatter.gather_coo by a loop: ``out[..., e, ...] = src[..., index[..., e], ...]``."""
    dim = index.dim() - 1
    index = index.expand(*src.shape[:dim], index.shape[-1])
    out = src.new_zeros(*src.shape[:dim], index.shape[-1], *src.shape[dim + 1:])
    for lead in _leading(src, dim):
        for e, s in enumerate(index[tuple(lead)].tolist()):
            out[tuple(lead)][e] = src[tuple(lead)][s]
    return out


def gather_csr_reference(src, indptr, length):
    """torch_scatter.gather_csr by a loop: position e of segment s gets ``src[..., s, ...]``; 0 outside
    ``[indptr[0], indptr[-1])``; ``length`` positions."""
    dim = indptr.dim() - 1
    indptr = indptr.expand(*src.shape[:dim], indptr.shape[-1])
    out = src.new_zeros(*src.shape[:dim], length, *src.shape[dim + 1:])
    for lead in _leading(src, dim):
        ptr = indptr[tuple(lead)].tolist()
        for s in range(len(ptr) - 1):
            for e in range(ptr[s], ptr[s + 1]):
                out[tuple(lead)][e] = src[tuple(lead)][s]
    return out


def _segments(src, index, dim, num_segments):
    """Yield (output position, src positions) per segment of every line along ``dim`` (small inputs only)."""
    index = _broadcast(index, src, dim)
    moved_index = index.movedim(dim, -1)
    for line in torch.cartesian_prod(*[torch.arange(s) for s in moved_index.shape[:-1]]).view(
            -1, moved_index.dim() - 1).tolist() if moved_index.dim() > 1 else [[]]:
        ids = moved_index[tuple(line)]
        for s in range(num_segments):
            yield tuple(line), s, (ids == s).nonzero().flatten()


def composite_reference(name, src, index, dim=-1, dim_size=None, unbiased=True):
    """scatter_softmax / scatter_log_softmax / scatter_logsumexp / scatter_std by a loop over segments calling
    torch.softmax, torch.log_softmax, torch.logsumexp and torch.std (empty segment 0; one value, unbiased: 0)."""
    dim = dim % src.dim()
    size = _size(src, _broadcast(index, src, dim), dim, None, dim_size)
    moved = src.movedim(dim, -1)
    elementwise = name in ('softmax', 'log_softmax')
    result = torch.zeros_like(moved) if elementwise else src.new_zeros(size).movedim(dim, -1)
    for line, s, where in _segments(src, index, dim, size[dim]):
        values = moved[line][where]
        if elementwise:
            if values.numel():
                result[line][where] = getattr(torch, name)(values, 0)
        elif values.numel():
            if name == 'logsumexp':
                result[line][s] = torch.logsumexp(values, 0)
            elif values.numel() > 1 or not unbiased:
                result[line][s] = values.std(unbiased=unbiased)
    return result.movedim(-1, dim)
