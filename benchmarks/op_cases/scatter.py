"""torch_scatter-compatible API (backed by segment_reduce) vs the pure-torch reference and torch peers.

scatter_max with a 1-D index (rows reduced directly) and with a per-row (B, E) index (element path);
segment_csr sum vs torch.segment_reduce (lengths).
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


def _csr_work(variant, rows, width, segments):
    from fsdlite.ops import segment_csr
    g = torch.Generator().manual_seed(0)
    src = torch.randn(rows, width, generator=g)
    lengths = torch.bincount(torch.randint(0, segments, (rows,), generator=g), minlength=segments)
    indptr = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    if variant == 'fsdlite':
        return lambda: segment_csr(src, indptr, reduce='sum')
    return lambda: torch.segment_reduce(src, 'sum', lengths=lengths, unsafe=True)


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): ``scatter_max`` (1-D and (B, E) index) and ``segment_csr`` sum,
    1M rows into 200k segments; ``quick``: 5k rows, 1k segments."""
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
    return out
