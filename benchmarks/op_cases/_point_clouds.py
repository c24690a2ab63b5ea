"""Point clouds for the neighbour-op benchmarks (knn, radius_neighbors, grid_subsample).

Real frames from ``../shared/data`` when present (spconv's Waymo-range ``benchmark-pc``, the S3DIS
conference-room subset), else deterministic synthetic stand-ins of the same character; the
returned ``source`` string says which was used.
"""
import os
from pathlib import Path

import numpy as np
import torch

SHARED = Path(os.environ.get('FSDLITE_SHARED_DATA', Path(__file__).resolve().parents[2].parent / 'shared' / 'data'))


def synthetic_lidar(n, seed=0):
    """A spinning 64-beam lidar over flat ground (z = -1.7 m) with walls 10-70 m away, (n, 3) float32."""
    g = np.random.default_rng(seed)
    elevation = np.deg2rad(g.choice(np.linspace(-25, 3, 64), n))
    azimuth = g.uniform(-np.pi, np.pi, n)
    wall = g.uniform(10, 70, n)
    ground = np.where(elevation < 0, 1.7 / np.tan(-np.minimum(elevation, -1e-3)), np.inf)
    r = np.minimum(ground, wall / np.cos(elevation)) + g.normal(0, 0.02, n)
    xyz = np.stack([r * np.cos(elevation) * np.cos(azimuth), r * np.cos(elevation) * np.sin(azimuth),
                    r * np.sin(elevation)], 1)
    return xyz.astype(np.float32)


def lidar_points(n, seed=0):
    """(points (n, 3) float32, source): n points of the Waymo-range frame (198k) or synthetic lidar."""
    path = SHARED / 'spconv_waymo' / 'benchmark-pc.npz'
    if path.is_file():
        pc = np.load(path)['pc']
        if n <= len(pc):
            sel = np.sort(np.random.default_rng(seed).choice(len(pc), n, replace=False))
            return torch.from_numpy(pc[sel]), 'waymo benchmark-pc'
    return torch.from_numpy(synthetic_lidar(n, seed)), 'synthetic lidar'


def indoor_points(seed=0):
    """(points (N, 3) float32, rgb (N, 3) float32, labels (N,) int64, source) of an indoor room."""
    path = SHARED / 's3dis_area5_conf1' / 'area5_conferenceRoom_1_subset.npz'
    if path.is_file():
        data = np.load(path)
        return (torch.from_numpy(data['xyz']), torch.from_numpy(data['rgb'].astype(np.float32) / 255),
                torch.from_numpy(data['sem_label'].astype(np.int64)), 'S3DIS conferenceRoom_1 subset')
    g = np.random.default_rng(seed)
    n = 246_417
    face = g.integers(0, 6, n)  # points on the 6 faces of a 4 x 6 x 3 m room
    xyz = g.uniform(0, 1, (n, 3)) * np.array([4.0, 6.0, 3.0])
    axis, high = face // 2, face % 2
    xyz[np.arange(n), axis] = high * np.array([4.0, 6.0, 3.0])[axis]
    return (torch.from_numpy(xyz.astype(np.float32)), torch.from_numpy(g.uniform(0, 1, (n, 3)).astype(np.float32)),
            torch.from_numpy(face.astype(np.int64)), 'synthetic room')
