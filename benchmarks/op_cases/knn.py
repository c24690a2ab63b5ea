"""knn: the C++ op vs its pure-torch reference (tiled brute force) and tiled ``torch.cdist + topk``.

Workloads
* lidar: 120k points of spconv's Waymo-range frame (``_point_clouds.lidar_points``), k = 16, self-kNN.
  The brute-force baselines cost O(Nq * Ns) (minutes at 120k x 120k), so they are timed side by side
  with the op on 4k of the 120k queries (same supports); the op alone also runs all 120k queries.
* voxels: VoxelNet's per-voxel kNN among muons in a 4-D latent space, k = 25, voxels as samples
  (segment batching): 100 and 1,000 voxels x 1,000 muons; cdist+topk runs batched over voxel chunks.
Peak memory of every variant is measured in a fresh subprocess (knn must stay O(N k)).

    python benchmarks/ops.py --only knn        # the table
    python benchmarks/ops.py --scaling knn     # peak memory vs size -> largest size within 8 GiB
"""
import torch

import _harness as h
from op_cases._point_clouds import lidar_points
from op_cases._scaffold import case, fit_8gib, sample_row, scaling_samples

CHUNK_BYTES = 256 << 20  # cdist+topk: distance-matrix bytes per voxel chunk


def voxel_muons(voxels, muons, dim=4, seed=0):
    """(latent (V*M, dim) float32, batch (V*M,) int64): muons grouped by voxel."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(voxels * muons, dim, generator=gen), torch.arange(voxels).repeat_interleave(muons)


def cdist_topk_voxels(latent, voxels, muons, k):
    """Batched cdist + topk per voxel chunk (each voxel's muons against themselves)."""
    x = latent.view(voxels, muons, -1)
    chunk = max(1, CHUNK_BYTES // (muons * muons * 4))
    parts_i, parts_d = [], []
    for v in range(0, voxels, chunk):
        d, i = torch.cdist(x[v:v + chunk], x[v:v + chunk]).topk(k, dim=2, largest=False)
        parts_i.append(i + (torch.arange(v, v + len(i)) * muons)[:, None, None])
        parts_d.append(d * d)
    return torch.cat(parts_i).view(-1, k), torch.cat(parts_d).view(-1, k)


def work(variant, workload, k, n=0, queries=0, voxels=0, muons=0):
    """Zero-arg callable running one variant (also the entry point of run_isolated)."""
    from fsdlite.ops import knn
    from fsdlite.ops.knn.reference import knn_cdist_topk, knn_reference
    if workload == 'lidar':
        support = lidar_points(n)[0]
        query = support[torch.linspace(0, n - 1, queries).long()] if queries < n else support
        return {'fsdlite': lambda: knn(query, support, k),
                'reference': lambda: knn_reference(query, support, k),
                'cdist+topk': lambda: knn_cdist_topk(query, support, k)}[variant]
    latent, batch = voxel_muons(voxels, muons)
    return {'fsdlite': lambda: knn(latent, latent, k, batch, batch),
            'reference': lambda: knn_reference(latent, latent, k, batch, batch),
            'cdist+topk': lambda: cdist_topk_voxels(latent, voxels, muons, k)}[variant]


def _case(size, variants, **kwargs):
    return case('knn', size, work, variants, variants[1] if len(variants) > 1 else variants[0], **kwargs)


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): lidar self-kNN (all 120k queries, op only; 4k queries, all
    variants) and voxel kNN (100 / 1,000 voxels); ``quick``: 20k lidar points, 20 voxels."""
    all3 = ('fsdlite', 'reference', 'cdist+topk')
    if quick:
        return [_case('lidar 20k pts, 1k queries, k=16', all3, workload='lidar', k=16, n=20_000, queries=1_000),
                _case('20 voxels x 500 muons, D=4, k=25', all3, workload='voxels', k=25, voxels=20, muons=500)]
    return [
        _case('lidar 120k pts, all 120k queries, k=16', ('fsdlite',), workload='lidar', k=16, n=120_000,
              queries=120_000),
        _case('lidar 120k pts, 4k queries, k=16', all3, workload='lidar', k=16, n=120_000, queries=4_000),
        _case('100 voxels x 1000 muons, D=4, k=25', all3, workload='voxels', k=25, voxels=100, muons=1000),
        _case('1000 voxels x 1000 muons, D=4, k=25', ('fsdlite', 'cdist+topk'), workload='voxels', k=25,
              voxels=1000, muons=1000),
    ]


def scaling(threads):
    """Peak memory of the op at growing sizes (fresh processes) and the size that would fill 8 GiB."""
    runs = {'lidar': [(n, dict(workload='lidar', k=16, n=n, queries=n, variant='fsdlite'))
                      for n in (30_000, 60_000, 120_000, 198_000)],
            'voxels': [(1000 * m, dict(workload='voxels', k=25, voxels=1000, muons=m, variant='fsdlite'))
                       for m in (500, 1000, 2000, 3000)]}
    fits = {name: scaling_samples(work, workload_runs, threads) for name, workload_runs in runs.items()}
    h.print_table(['workload', 'points', 's', 'peak', 'bytes/point'],
                  [[name, *sample_row(*s)] for name, samples in fits.items() for s in samples])
    h.print_result({'knn_scaling': {name: fit_8gib(samples, name, threads) for name, samples in fits.items()}})
