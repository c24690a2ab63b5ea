"""Pure-torch reference of segment_reduce (torch_scatter semantics), for tests and benchmarks."""
import torch

_SMALL = (torch.int8, torch.int16, torch.uint8, torch.bool)


def segment_reduce_reference(src, index, num_segments, reduce):
    """Reduce rows of ``src`` (N, *F) into ``num_segments`` segments given by ``index`` (N,).

    Returns ``(out, arg)``: out (S, *F) with empty segments 0 (1 for 'mul'); for max/min ``arg`` (S, *F) holds the
    first row attaining the extreme (N for empty segments, NaN values skipped), else ``None``. Sums and products of
    int8/int16/uint8/bool accumulate in int64 and are cast back (a bool sum is 'any', a bool product 'all').
    """
    if src.dtype in _SMALL:
        out, arg = segment_reduce_reference(src.long(), index, num_segments, reduce)
        return (out != 0 if src.dtype == torch.bool else out.to(src.dtype)), arg
    n = src.shape[0]
    shape = (num_segments,) + tuple(src.shape[1:])
    idx = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    if reduce == 'mul':
        return torch.ones(shape, dtype=src.dtype, device=src.device).scatter_reduce_(0, idx, src, 'prod'), None
    if reduce in ('sum', 'mean'):
        out = torch.zeros(shape, dtype=src.dtype, device=src.device).scatter_add_(0, idx, src)
        if reduce == 'mean':
            count = torch.zeros(num_segments, dtype=torch.long, device=src.device).scatter_add_(
                0, index, torch.ones_like(index)).clamp_(min=1).view(-1, *([1] * (src.dim() - 1)))
            out = out.div(count, rounding_mode='floor') if not src.is_floating_point() else out / count
        return out, None
    values = src
    if src.is_floating_point():
        fill = float('-inf') if reduce == 'max' else float('inf')
        values = torch.where(torch.isnan(src), torch.full_like(src, fill), src)
    amode = 'amax' if reduce == 'max' else 'amin'
    out = torch.zeros(shape, dtype=src.dtype, device=src.device).scatter_reduce(0, idx, values, amode,
                                                                                include_self=False)
    rows = torch.arange(n, device=src.device).view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    winner = (values == out.gather(0, idx))
    if src.is_floating_point():
        winner &= ~torch.isnan(src)
    candidates = torch.where(winner, rows, torch.full_like(rows, n))
    arg = torch.full(shape, n, dtype=torch.long, device=src.device).scatter_reduce(0, idx, candidates, 'amin')
    out = torch.where(arg == n, torch.zeros_like(out), out)
    return out, arg
