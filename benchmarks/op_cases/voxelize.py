"""voxelize (C++) vs its pure-torch reference (torch.unique based) on a synthetic spinning-lidar sweep.

The sweep is in scan order (64 beams x azimuth steps), like a real lidar frame; the shuffled variant
removes that locality (worst case for the hash table).  Peak memory per variant in a fresh subprocess.
"""
import math

import torch

from op_cases._scaffold import case

VOXEL = [0.1, 0.1, 0.1]
RANGE = [-80.0, -80.0, -2.0, 80.0, 80.0, 6.0]


def lidar_sweep(num_points, seed=0, shuffled=False):
    """(N, 4) float32 points of a 64-beam sweep: ground returns and obstacles at 2-75 m, scan order."""
    g = torch.Generator().manual_seed(seed)
    beams = 64
    steps = math.ceil(num_points / beams)
    azimuth = torch.linspace(-math.pi, math.pi, steps).repeat_interleave(beams)[:num_points]
    elevation = torch.linspace(-0.43, 0.05, beams).repeat(steps)[:num_points]
    ground = 1.8 / torch.tan(-elevation).clamp(min=1e-3)
    obstacle = 2 + 73 * torch.rand(num_points, generator=g)
    r = torch.where(elevation < -0.02, torch.minimum(ground, obstacle), obstacle)
    r = r + 0.02 * torch.randn(num_points, generator=g)
    xyz = torch.stack([r * torch.cos(elevation) * torch.cos(azimuth), r * torch.cos(elevation) * torch.sin(azimuth),
                       1.8 + r * torch.sin(elevation)], 1)
    points = torch.cat([xyz, torch.rand(num_points, 1, generator=g)], 1)
    if shuffled:
        points = points[torch.randperm(num_points, generator=g)]
    return points


def work(variant, num_points, shuffled=False):
    """Zero-arg callable voxelizing one sweep with ``variant`` ('fsdlite' or 'reference')."""
    from fsdlite.ops import voxelize
    from fsdlite.ops.voxelize.reference import voxelize_reference
    fn = voxelize if variant == 'fsdlite' else voxelize_reference
    points = lidar_sweep(num_points, shuffled=shuffled)
    return lambda: fn(points, VOXEL, RANGE)


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): 1M-point sweep in scan order and shuffled; ``quick``: one
    5k-point sweep."""
    return [case('voxelize', f'N={num_points}{" shuffled" if shuffled else ""}', work, ('reference', 'fsdlite'),
                 'reference', measure_memory=not shuffled, num_points=num_points, shuffled=shuffled)
            for num_points, shuffled in ([(5_000, False)] if quick else [(1_000_000, False), (1_000_000, True)])]
