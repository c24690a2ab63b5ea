"""grid_subsample: the C++ op vs its pure-torch reference (torch.unique over cell keys).

Workloads: 120k lidar points (``_point_clouds.lidar_points``) at 0.1 m with 4 feature channels,
and the S3DIS conference-room subset (246k points) at 4 cm with RGB features and semantic labels
(KPConv's input subsampling).

    python benchmarks/ops.py --only grid_subsample
    python benchmarks/ops.py --scaling grid_subsample   # largest size within 8 GiB
"""
import torch

import _harness as h
from op_cases._point_clouds import indoor_points, lidar_points
from op_cases._scaffold import case, fit_8gib, print_samples, scaling_samples


def work(variant, workload, n=0, voxel=0.1):
    """Zero-arg callable running one variant (also the entry point of run_isolated)."""
    from fsdlite.ops import grid_subsample
    from fsdlite.ops.grid_subsample.reference import grid_subsample_reference
    if workload == 'lidar':
        points = lidar_points(n)[0] if n <= 198_130 else torch.cat(  # tiled copies 200 m apart beyond one frame
            [lidar_points(198_130)[0] + torch.tensor([200.0 * c, 0, 0]) for c in range(-(-n // 198_130))])[:n]
        features = torch.randn(len(points), 4, generator=torch.Generator().manual_seed(0))
        labels = None
    else:
        points, features, labels, _ = indoor_points()
    if variant == 'fsdlite':
        return lambda: grid_subsample(points, voxel, features=features, labels=labels)
    return lambda: grid_subsample_reference(points, [voxel] * 3, features=features, labels=labels)


def _case(size, **kwargs):
    return case('grid_subsample', size, work, ('fsdlite', 'reference'), 'reference', **kwargs)


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): 120k lidar points at 0.1 m and the S3DIS room at 4 cm; ``quick``:
    20k lidar points only."""
    if quick:
        return [_case('lidar 20k pts, 0.1 m, C=4', workload='lidar', n=20_000, voxel=0.1)]
    return [_case('lidar 120k pts, 0.1 m, C=4', workload='lidar', n=120_000, voxel=0.1),
            _case('S3DIS 246k pts, 4 cm, RGB + labels', workload='indoor', voxel=0.04)]


def scaling(threads):
    """Peak memory of the op at growing sizes (fresh processes) and the size that would fill 8 GiB."""
    runs = [(n, dict(variant='fsdlite', workload='lidar', n=n, voxel=0.1))
            for n in (250_000, 500_000, 1_000_000, 2_000_000)]
    samples = scaling_samples(work, runs, threads)
    print_samples(samples)
    h.print_result({'grid_subsample_scaling': fit_8gib(samples, 'C=4', threads)})
