"""S3DIS room reader: a room as an ``.npz`` (keys ``xyz``, ``rgb``, ``sem_label``, ``class_names``),
e.g. the Area 5 conferenceRoom_1 subset in ``shared/data/s3dis_area5_conf1``.

* ``mode='train'``: random input regions (after KPConv's S3DIS input spheres): sample ``i`` is the
  points within horizontal distance ``sphere_radius`` of a random room point (a vertical cylinder, so
  floor and ceiling stay in; deterministic by seed and index), at most
  ``max_points`` of them (a random subset beyond; the count dropped is in ``metainfo['num_dropped_points']``
  and reported with a warning the first time, totals in ``dropped_totals``).
* ``mode='test'``: the room cut into vertical tiles of ``tile_size`` (every point belongs to exactly
  one tile), so predictions of all samples together cover every room point once.

Points are ``(N, 6)`` float32: xyz relative to the sample's centre (z relative to the room floor) and
rgb in [0, 1]; labels go to ``gt_pts_seg.pts_semantic_mask``; ``metainfo['point_index']`` holds each
point's row in the room.
"""
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..registry import DATASETS
from ..structures import Det3DDataSample, PointData
from fsdlite.utils.drop_report import report_dropped

S3DIS_CLASSES = ('ceiling', 'floor', 'wall', 'beam', 'column', 'window', 'door', 'table', 'chair', 'sofa',
                 'bookcase', 'board', 'clutter')
MODES = ('train', 'test')


def load_s3dis_room(path):
    """Read a room ``.npz``; returns dict ``xyz`` (N, 3) float32, ``rgb`` (N, 3) uint8, ``labels`` (N,) int64.

    Raises:
        FileNotFoundError: no such file.
        ValueError: missing keys, inconsistent lengths, unknown class names or labels out of range.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'S3DIS room file {str(path)!r} does not exist')
    with np.load(path) as data:
        missing = sorted({'xyz', 'rgb', 'sem_label'} - set(data.files))
        if missing:
            raise ValueError(f'{path}: missing keys {missing}; expected xyz, rgb, sem_label (and class_names)')
        xyz, rgb, labels = data['xyz'], data['rgb'], data['sem_label'].astype(np.int64)
        names = tuple(str(n) for n in data['class_names']) if 'class_names' in data.files else S3DIS_CLASSES
    if names != S3DIS_CLASSES:
        raise ValueError(f'{path}: class_names {names} differ from the 13 S3DIS classes {S3DIS_CLASSES}')
    if xyz.ndim != 2 or xyz.shape[1] != 3 or rgb.shape != xyz.shape or labels.shape != (len(xyz),):
        raise ValueError(f'{path}: expected xyz (N, 3), rgb (N, 3), sem_label (N,), got {xyz.shape}, {rgb.shape}, '
                         f'{labels.shape}')
    if labels.size and (labels.min() < 0 or labels.max() >= len(S3DIS_CLASSES)):
        raise ValueError(f'{path}: sem_label values must lie in [0, {len(S3DIS_CLASSES)}), got '
                         f'[{labels.min()}, {labels.max()}]')
    return dict(xyz=xyz.astype(np.float32), rgb=rgb, labels=labels)


@DATASETS.register_module()
class S3DISRoomDataset(Dataset):
    """Input regions (train) or covering tiles (test) of one S3DIS room.

    Args:
        path (str): room ``.npz``.
        mode (str): 'train' or 'test'.
        num_samples (int): regions per epoch (train).
        sphere_radius (float): horizontal radius of a train region (m).
        tile_size (float): test tile side (m).
        max_points (int): cap on points per train region.
        seed (int): seed of the region centres.
    """

    def __init__(self, path, mode='train', num_samples=200, sphere_radius=1.5, tile_size=2.0, max_points=40000,
                 seed=0):
        if mode not in MODES:
            raise ValueError(f'S3DISRoomDataset: mode must be one of {MODES}, got {mode!r}')
        if not sphere_radius > 0 or not tile_size > 0 or max_points < 1:
            raise ValueError(f'S3DISRoomDataset: sphere_radius ({sphere_radius!r}), tile_size ({tile_size!r}) and '
                             f'max_points ({max_points!r}) must be positive')
        room = load_s3dis_room(path)
        self.xyz, self.rgb, self.labels = room['xyz'], room['rgb'], room['labels']
        self.floor = float(self.xyz[:, 2].min()) if len(self.xyz) else 0.0
        self.mode, self.seed = mode, int(seed)
        self.sphere_radius, self.max_points = float(sphere_radius), int(max_points)
        self.metainfo = dict(classes=S3DIS_CLASSES)
        if mode == 'train':
            self.num_samples = int(num_samples)
        else:
            cells = np.floor((self.xyz[:, :2] - self.xyz[:, :2].min(0)) / tile_size).astype(np.int64)
            keys, self.tile_of = np.unique(cells, axis=0, return_inverse=True)
            self.tile_of = self.tile_of.reshape(-1)
            order = np.argsort(self.tile_of, kind='stable')
            self.tiles = np.split(order, np.cumsum(np.bincount(self.tile_of, minlength=len(keys)))[:-1])
            self.num_samples = len(self.tiles)

    def __len__(self):
        return self.num_samples

    def indices(self, index):
        """(room rows of sample ``index``, centre xy, points dropped by the cap)."""
        if not 0 <= index < self.num_samples:
            raise IndexError(f'S3DISRoomDataset: index {index} out of range for {self.num_samples} samples')
        if self.mode == 'test':
            rows = self.tiles[index]
            return rows, self.xyz[rows, :2].mean(0), 0
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, index]))
        centre = self.xyz[rng.integers(len(self.xyz)), :2]
        rows = np.flatnonzero(((self.xyz[:, :2] - centre) ** 2).sum(1) < self.sphere_radius ** 2)
        dropped = max(len(rows) - self.max_points, 0)
        if dropped:
            rows = np.sort(rng.choice(rows, self.max_points, replace=False))
        return rows, centre, dropped

    def __getitem__(self, index):
        rows, centre, dropped = self.indices(index)
        report_dropped(self, 'num_dropped_points', dropped, lambda: f'dropped {dropped} of {len(rows) + dropped} '
                       f'points of sample {index} (a region holds at most max_points={self.max_points})')
        xyz = self.xyz[rows] - np.array([centre[0], centre[1], self.floor], dtype=np.float32)
        points = np.concatenate([xyz, self.rgb[rows].astype(np.float32) / 255.0], 1).astype(np.float32)
        sample = Det3DDataSample(metainfo=dict(sample_idx=index, classes=S3DIS_CLASSES, point_index=rows,
                                               num_dropped_points=dropped))
        sample.gt_pts_seg = PointData(pts_semantic_mask=torch.from_numpy(self.labels[rows]))
        return dict(inputs=dict(points=torch.from_numpy(points)), data_samples=sample)
