"""radius_neighbors: the C++ op vs its pure-torch reference (tiled brute force).

Workload: a KPConv first layer on the S3DIS conference-room subset (``_point_clouds.indoor_points``):
grid-subsampled at 2 cm, 100k points kept, radius 6 cm, H = 30 (the shadow-index layout KPConv
feeds its convolutions). The reference costs O(Nq * Ns), so it is timed side by side with the op on
5k of the 100k queries; the op alone also runs all 100k queries.

    python benchmarks/ops.py --only radius_neighbors
    python benchmarks/ops.py --scaling radius_neighbors   # largest size within 8 GiB
"""
import torch

import _harness as h
from op_cases._point_clouds import indoor_points
from op_cases._scaffold import case, fit_8gib, print_samples, scaling_samples
RADIUS, LIMIT, GRID = 0.06, 30, 0.02


def kpconv_points(n, seed=0):
    """n points of the indoor room after a 2 cm grid subsampling (random subset; tiled copies if short)."""
    from fsdlite.ops import grid_subsample
    points = grid_subsample(indoor_points()[0], GRID).points
    copies = -(-n // len(points))
    if copies > 1:  # larger than the room: side-by-side copies 20 m apart
        points = torch.cat([points + torch.tensor([20.0 * c, 0, 0]) for c in range(copies)])
    keep = torch.randperm(len(points), generator=torch.Generator().manual_seed(seed))[:n]
    return points[torch.sort(keep).values]


def work(variant, n, queries, radius=RADIUS, limit=LIMIT):
    """Zero-arg callable running one variant (also the entry point of run_isolated)."""
    from fsdlite.ops import radius_neighbors
    from fsdlite.ops.radius_neighbors.reference import radius_neighbors_reference
    support = kpconv_points(n)
    query = support[torch.linspace(0, n - 1, queries).long()] if queries < n else support
    if variant == 'fsdlite':
        return lambda: radius_neighbors(query, support, radius, limit, return_counts=True)
    return lambda: radius_neighbors_reference(query, support, radius, limit)


def _case(size, variants, **kwargs):
    return case('radius_neighbors', size, work, variants, variants[-1], **kwargs)


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): 100k points with all queries (op only; the size string has
    neighbour stats) and with 5k queries; ``quick``: 20k points, 1k queries."""
    both = ('fsdlite', 'reference')
    if quick:
        return [_case(f'KPConv 20k pts, 1k queries, r={RADIUS}, H={LIMIT}', both, n=20_000, queries=1_000)]
    counts = work('fsdlite', 100_000, 100_000)()[1].float()
    stats = f'mean {counts.mean():.1f} nbrs, {(counts > LIMIT).float().mean() * 100:.1f}% truncated'
    return [_case(f'KPConv 100k pts, all queries, r={RADIUS}, H={LIMIT} ({stats})', ('fsdlite',),
                  n=100_000, queries=100_000),
            _case(f'KPConv 100k pts, 5k queries, r={RADIUS}, H={LIMIT}', both, n=100_000, queries=5_000)]


def scaling(threads):
    """Peak memory of the op at growing sizes (fresh processes) and the size that would fill 8 GiB."""
    runs = [(n, dict(variant='fsdlite', n=n, queries=n)) for n in (100_000, 200_000, 400_000, 800_000)]
    samples = scaling_samples(work, runs, threads)
    print_samples(samples)
    h.print_result({'radius_neighbors_scaling': fit_8gib(samples, f'H={LIMIT}', threads)})
