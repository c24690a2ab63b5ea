"""segment_reduce (C++) vs its pure-torch reference and torch.Tensor.scatter_reduce (include_self=False).

~1M points x 16 features reduced into ~200k voxels (forward), plus max and mul (product) forward + backward.
Peak memory per variant (max) in a fresh subprocess.
"""
import torch

from op_cases._scaffold import case

MODES = {'sum': 'sum', 'mean': 'mean', 'max': 'amax', 'mul': 'prod'}


def inputs(rows, width, segments, requires_grad=False, seed=0):
    """Seeded ``(src (rows, width) float32, index (rows,) int64 in [0, segments))``."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(rows, width, generator=g).requires_grad_(requires_grad)
    return src, torch.randint(0, segments, (rows,), generator=g)


def forward(variant, reduce, src, index, segments):
    """One reduction; returns the values."""
    if variant == 'fsdlite':
        from fsdlite.ops import segment_reduce
        return segment_reduce(src, index, segments, reduce)
    if variant == 'reference':
        from fsdlite.ops.segment_reduce.reference import segment_reduce_reference
        return segment_reduce_reference(src, index, segments, reduce)[0]
    idx = index.view(-1, 1).expand_as(src)
    if reduce == 'mul':  # empty product 1, as the op
        return src.new_ones(segments, src.shape[1]).scatter_reduce(0, idx, src, 'prod')
    return src.new_zeros(segments, src.shape[1]).scatter_reduce(0, idx, src, MODES[reduce], include_self=False)


def work(variant, reduce, rows, width, segments, backward=False):
    """Zero-arg callable: forward (and backward) of ``variant`` ('fsdlite', 'reference', 'scatter_reduce')."""
    src, index = inputs(rows, width, segments, requires_grad=backward)

    def run():
        out = forward(variant, reduce, src, index, segments)
        if backward:
            out.sum().backward()
            src.grad = None

    return run


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): sum, mean, max, mul forward and max, mul forward + backward, 1M
    rows into 200k segments; ``quick``: 5k rows, 1k segments."""
    rows, width, segments = (5_000, 16, 1_000) if quick else (1_000_000, 16, 200_000)
    variants = ('reference', 'scatter_reduce', 'fsdlite')
    return [case(f'segment_reduce {reduce}{" fwd+bwd" if backward else ""}', f'N={rows} F={width} S={segments}', work,
                 variants, 'reference', measure_memory=reduce == 'max' and not backward, reduce=reduce, rows=rows,
                 width=width, segments=segments, backward=backward)
            for reduce, backward in (('sum', False), ('mean', False), ('max', False), ('max', True), ('mul', False),
                                     ('mul', True))]
