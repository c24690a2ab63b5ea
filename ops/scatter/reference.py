"""Pure-torch reference of the torch_scatter-compatible API (torch.scatter_add_ / scatter_reduce only;
independent of segment_reduce), for tests and benchmarks. Never modifies a given ``out``."""
import torch


def _broadcast(index, src, dim):
    if index.dim() == 1:
        index = index.view(*([1] * dim), -1)
    return index.view(*index.shape, *([1] * (src.dim() - index.dim()))).expand(src.shape).long()


def scatter_reference(src, index, dim=-1, out=None, dim_size=None, reduce='sum'):
    """torch_scatter.scatter semantics; returns ``(values, arg)`` (arg None for sum/mean).

    max/min: NaN never wins, ties pick the first position, empty segments give 0 and arg ``src.size(dim)``;
    a given ``out`` keeps its value unless a source value is strictly better.
    """
    dim = dim % src.dim()
    index = _broadcast(index, src, dim)
    size = list(src.shape)
    if out is not None:
        size[dim] = out.shape[dim]
    else:
        size[dim] = dim_size if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
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
    returns ``(values, arg)`` with arg None for sum/mean."""
    dim = indptr.dim() - 1
    indptr = indptr.expand(*src.shape[:dim], indptr.shape[-1])
    num_segments = max(indptr.shape[-1] - 1, 0)
    shape = list(src.shape)
    shape[dim] = num_segments
    values = src.new_zeros(shape)
    arg = torch.full(shape, src.shape[dim], dtype=torch.long) if reduce in ('max', 'min') else None
    for lead in torch.cartesian_prod(*[torch.arange(s) for s in src.shape[:dim]]).view(-1, dim).tolist() \
            if dim else [[]]:
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
