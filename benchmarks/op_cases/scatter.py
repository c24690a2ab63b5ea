"""torch_scatter-compatible API (backed by segment_reduce) vs the pure-torch reference and torch peers.

scatter_max with a 1-D index (rows reduced directly) and with a per-row (B, E) index (element path);
segment_csr sum vs torch.segment_reduce (lengths); scatter_mul vs scatter_reduce('prod'); gather_csr vs
repeat_interleave; the composites scatter_softmax / scatter_logsumexp / scatter_std (forward + backward) vs the same
formulas written with torch.scatter_reduce / scatter_add.
"""
import torch


def _scatter_work(variant, rows, width, segments, batched):
    from fsdlite.ops import scatter_max
    from fsdlite.ops.scatter.reference import scatter_reference
    g = torch.Generator().manual_seed(0)
    if batched:  # (B, E, F) with a (B, E) index along dim 1
        src = torch.randn(4, rows // 4, width, generator=g)
        index = torch.randint(0, segments // 4, (4, rows // 4), generator=g)
        dim = 1
    else:
        src = torch.randn(rows, width, generator=g)
        index = torch.randint(0, segments, (rows,), generator=g)
        dim = 0
    if variant == 'fsdlite':
        return lambda: scatter_max(src, index, dim)
    if variant == 'reference':
        return lambda: scatter_reference(src, index, dim, reduce='max')
    idx = (index.unsqueeze(-1) if batched else index.view(-1, 1)).expand_as(src)
    size = list(src.shape)
    size[dim] = int(index.max()) + 1
    return lambda: src.new_zeros(size).scatter_reduce(dim, idx, src, 'amax', include_self=False)


def _inputs(rows, width, segments, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    src = torch.randn(rows, width, generator=g).requires_grad_(requires_grad)
    return src, torch.randint(0, segments, (rows,), generator=g)


def _csr_work(variant, rows, width, segments):
    from fsdlite.ops import segment_csr
    src, index = _inputs(rows, width, segments)
    lengths = torch.bincount(index, minlength=segments)
    indptr = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    if variant == 'fsdlite':
        return lambda: segment_csr(src, indptr, reduce='sum')
    return lambda: torch.segment_reduce(src, 'sum', lengths=lengths, unsafe=True)


def _mul_work(variant, rows, width, segments):
    from fsdlite.ops import scatter_mul
    src, index = _inputs(rows, width, segments)
    if variant == 'fsdlite':
        return lambda: scatter_mul(src, index, 0, dim_size=segments)
    idx = index.view(-1, 1).expand_as(src)
    return lambda: src.new_ones(segments, width).scatter_reduce(0, idx, src, 'prod')


def _gather_work(variant, rows, width, segments):
    from fsdlite.ops import gather_csr
    values, index = _inputs(segments, width, segments)
    lengths = torch.bincount(torch.randint(0, segments, (rows,), generator=torch.Generator().manual_seed(1)),
                             minlength=segments)
    indptr = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    if variant == 'fsdlite':
        return lambda: gather_csr(values, indptr)
    return lambda: values.index_select(0, torch.repeat_interleave(torch.arange(segments), lengths, output_size=rows))


def torch_composite(name, src, index, segments):
    """scatter_softmax / scatter_logsumexp / scatter_std written with torch.scatter_reduce / scatter_add (1-D index
    along dim 0): the peer the composites are measured against."""
    idx = index.view(-1, 1).expand_as(src)
    shape = (segments, src.shape[1])
    if name == 'std':
        count = src.new_zeros(segments).index_add_(0, index, src.new_ones(index.shape)).clamp(min=1).view(-1, 1)
        mean = src.new_zeros(shape).scatter_add(0, idx, src) / count
        deviation = src - mean.index_select(0, index)
        squares = src.new_zeros(shape).scatter_add(0, idx, deviation * deviation)
        return (squares / (count - 1).clamp(min=1)).sqrt()
    peak = src.new_full(shape, float('-inf')).scatter_reduce(0, idx, src.detach(), 'amax')
    peak = torch.where(torch.isfinite(peak), peak, 0.0)
    exp = (src - peak.index_select(0, index)).exp()
    total = src.new_zeros(shape).scatter_add(0, idx, exp)
    if name == 'softmax':
        return exp / total.index_select(0, index)
    return total.log() + peak


def _composite_work(variant, name, rows, width, segments):
    from fsdlite.ops import scatter_logsumexp, scatter_softmax, scatter_std
    src, index = _inputs(rows, width, segments, requires_grad=True)
    fn = {'softmax': scatter_softmax, 'logsumexp': scatter_logsumexp, 'std': scatter_std}[name]

    def run():
        out = fn(src, index, 0, dim_size=segments) if variant == 'fsdlite' else torch_composite(name, src, index,
                                                                                                   segments)
        out.sum().backward()
        src.grad = None

    return run


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): ``scatter_max`` (1-D and (B, E) index), ``segment_csr`` sum,
    ``scatter_mul``, ``gather_csr`` and the composites, 1M rows into 200k segments; ``quick``: 5k rows, 1k segments."""
    rows, width, segments = (5_000, 16, 1_000) if quick else (1_000_000, 16, 200_000)
    size = f'N={rows} F={width} S={segments}'
    out = []
    for batched in (False, True):
        out.append(dict(
            op=f'scatter_max dim={1 if batched else 0}{" (B,E) index" if batched else ""}', size=size,
            variants={v: _scatter_work(v, rows, width, segments, batched)
                      for v in ('reference', 'scatter_reduce', 'fsdlite')},
            baseline='reference'))
    out.append(dict(op='segment_csr sum', size=size,
                    variants={v: _csr_work(v, rows, width, segments) for v in ('torch.segment_reduce', 'fsdlite')},
                    baseline='torch.segment_reduce'))
    out.append(dict(op='scatter_mul', size=size,
                    variants={v: _mul_work(v, rows, width, segments) for v in ('scatter_reduce', 'fsdlite')},
                    baseline='scatter_reduce'))
    out.append(dict(op='gather_csr', size=size,
                    variants={v: _gather_work(v, rows, width, segments) for v in ('repeat_interleave', 'fsdlite')},
                    baseline='repeat_interleave'))
    for name in ('softmax', 'logsumexp', 'std'):
        out.append(dict(op=f'scatter_{name} fwd+bwd', size=size,
                        variants={v: _composite_work(v, name, rows, width, segments) for v in ('torch', 'fsdlite')},
                        baseline='torch'))
    return out
