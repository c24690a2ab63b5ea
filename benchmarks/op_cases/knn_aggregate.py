"""knn_aggregate vs its pure-torch reference (gather + weight + mean/max), forward + backward.

Sizes follow VoxelNet's muon stage: Nq = voxels x muons query rows, k = 25 neighbours,
F = 22 messages.  Peak memory of each variant is measured in a fresh subprocess.
"""
import torch

from op_cases._scaffold import case

SIZES_FULL = [(20_000, 25, 22), (200_000, 25, 22)]
SIZES_QUICK = [(5_000, 25, 22)]


def _inputs(rows, k, width, seed=0):
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(rows, width, generator=gen, requires_grad=True)
    index = torch.randint(0, rows, (rows, k), generator=gen)
    weights = torch.rand(rows, k, generator=gen, requires_grad=True)
    return features, index, weights


def work(variant, rows, k, width):
    """Zero-arg callable running one forward + backward of ``variant`` ('fsdlite' or 'reference')."""
    from fsdlite.ops import knn_aggregate
    from fsdlite.ops.knn_aggregate.reference import knn_aggregate_reference
    features, index, weights = _inputs(rows, k, width)
    fn = knn_aggregate if variant == 'fsdlite' else knn_aggregate_reference

    def run():
        mean, maximum = fn(features, index, weights)[:2]
        (mean.sum() + maximum.sum()).backward()
        features.grad = weights.grad = None

    return run


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): forward + backward at ``SIZES_FULL`` (Nq, k, F); ``quick``:
    ``SIZES_QUICK``."""
    return [case('knn_aggregate fwd+bwd', f'Nq={rows} k={k} F={width}', work, ('reference', 'fsdlite'), 'reference',
                 rows=rows, k=k, width=width) for rows, k, width in (SIZES_QUICK if quick else SIZES_FULL)]
