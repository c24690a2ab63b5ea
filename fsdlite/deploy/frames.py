"""Real lidar frames used to verify deployed detectors (test fixtures in ``../shared/data``, reference/data.md).

* ``kitti``: KITTI object frame 000008 (17,238 points, x, y, z, intensity);
* ``nuscenes``: one nuScenes LIDAR_TOP keyframe (34,688 points, x, y, z, intensity, ring);
* ``waymo``: spconv's 198,130-point Waymo-range benchmark frame (x, y, z only).

Clouds are adapted to the model's C point columns: extra columns are dropped, missing ones are zeros.
"""
import os
from pathlib import Path

import numpy as np
import torch

from ..datasets.from_config import config_dataset
from ..utils.errors import DataError

LIDAR_FRAMES = {
    'kitti': ('kitti_object_000008/000008.bin', 4, 'KITTI object 000008 (mmdetection3d demo)'),
    'nuscenes': ('nuscenes_demo/LIDAR_TOP_1532402927647951.pcd.bin', 5, 'nuScenes LIDAR_TOP keyframe (mmdet3d demo)'),
    'waymo': ('spconv_waymo/benchmark-pc.npz', 3, "spconv's 198k-point Waymo-range benchmark frame"),
}


def default_data_root():
    """``$FSDLITE_SHARED_DATA`` or ``../shared/data`` beside the repository."""
    env = os.environ.get('FSDLITE_SHARED_DATA')
    return Path(env) if env else Path(__file__).resolve().parents[3] / 'shared' / 'data'


def load_lidar_frame(name, channels, data_root=None):
    """(N, channels) float32 points of a named frame (see the module docstring).

    Raises:
        KeyError: unknown name; FileNotFoundError: the fixture is absent.
    """
    if name not in LIDAR_FRAMES:
        raise KeyError(f'unknown lidar frame {name!r}; known: {sorted(LIDAR_FRAMES)}')
    rel, width, _ = LIDAR_FRAMES[name]
    path = Path(data_root or default_data_root()) / rel
    if not path.is_file():
        raise FileNotFoundError(f'lidar frame {name!r} not found at {path} (set FSDLITE_SHARED_DATA or --data-root)')
    if path.suffix == '.npz':
        points = np.load(path)['pc'].astype(np.float32)
    else:
        points = np.fromfile(path, np.float32).reshape(-1, width)
    points = torch.from_numpy(np.ascontiguousarray(points))
    if points.shape[1] >= channels:
        return points[:, :channels].contiguous()
    return torch.cat([points, points.new_zeros(points.shape[0], channels - points.shape[1])], 1)


def available_lidar_frames(data_root=None):
    """Names of the frames present under ``data_root``."""
    root = Path(data_root or default_data_root())
    return [name for name, (rel, _, _) in LIDAR_FRAMES.items() if (root / rel).is_file()]


def dataset_batches(cfg, batch_size, count=2):
    """Up to ``count`` batches of ``batch_size`` items of the config's test/val dataset (items repeat when it is
    shorter), not collated.

    Returns:
        list of ``(name, items, source)``; empty when the config has no dataset.
    """
    try:
        dataset, split, _ = config_dataset(cfg, ('test', 'val'), 'verification frames')
    except DataError:
        return []
    if len(dataset) == 0:
        return []
    out = []
    for f in range(min(count, max(len(dataset) // batch_size, 1))):
        items = [dataset[(f * batch_size + i) % len(dataset)] for i in range(batch_size)]
        out.append((f'{type(dataset).__name__}[{f * batch_size}:{(f + 1) * batch_size}]', items,
                    f'{split}_dataloader.dataset of the config'))
    return out


__all__ = ['LIDAR_FRAMES', 'default_data_root', 'load_lidar_frame', 'available_lidar_frames', 'dataset_batches']
