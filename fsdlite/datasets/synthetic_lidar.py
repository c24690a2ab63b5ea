"""SyntheticLidarDataset: simulated KITTI street frames (:mod:`fsdlite.datasets.sim`), deterministic by seed."""
import numpy as np
import torch
from mmengine.logging import print_log

from ..registry import DATASETS
from fsdlite.ops import count_points_in_boxes
from fsdlite.utils.drop_report import report_dropped
from .lidar_det_dataset import LidarDetDataset
from .sim import LidarSpec, SensorNoise, WorldSpec, render_frame
from .sim.shapes import BUILDERS as ROAD_USERS

SPLITS = {'train': 0, 'val': 1, 'test': 2}


def frame_rng(seed, split_code, index):
    """The random stream of one frame: independent per (base seed, split, index)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(split_code), int(index)]))


def _options(cls, name, cfg):
    try:
        return cls(**dict(cfg or {}))
    except TypeError as exc:
        raise TypeError(f'SyntheticLidarDataset: bad {name} options {dict(cfg or {})}: {exc}') from None


def _copied(value):
    """A copy of an array, tensor or dict of them (other values as they are)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value.copy() if hasattr(value, 'copy') else value


@DATASETS.register_module()
class SyntheticLidarDataset(LidarDetDataset):
    """Simulated KITTI frames: urban streets ray-cast by an HDL-64E model, cropped to the camera's view.

    Frame ``i`` of a split is generated from ``SeedSequence([seed, split, i])``, so frames are
    reproducible, independent of the order they are read in, and train/val/test never share a stream.
    Each sample has points ``(N, 4)`` (x, y, z, reflectance), bottom-centre lidar boxes ``(M, 7)`` and labels
    of the target classes' road users that returned points, a per-point semantic mask (class of the object
    hit, ``len(classes)`` for everything else) and instance mask, and metainfo: ``num_points_in_gt``,
    ``kitti_annos`` (every labelled road user, vans, trucks and trams included, with KITTI's type, 2D box,
    truncation and occlusion level, as :class:`~fsdlite.evaluation.DetMetric`'s KITTI scoring reads them),
    ``lidar2img``, ``street`` (the street type) and ``num_skipped_objects`` (road users that found no free
    spot; reported with a warning the first time, totals in :attr:`dropped_totals`).

    Args:
        num_frames (int): frames in the split.
        split (str): 'train', 'val' or 'test'.
        seed (int): base seed.
        lidar (dict): :class:`~fsdlite.datasets.sim.LidarSpec` options (beams, azimuth step, camera crop, ...).
        scene (dict): :class:`~fsdlite.datasets.sim.WorldSpec` options (street types, traffic).
        noise (dict): :class:`~fsdlite.datasets.sim.SensorNoise` options.
        cache (bool): keep generated raw frames in memory (per worker process).
        pipeline, metainfo, test_mode, lazy_init, indices: as :class:`mmengine.dataset.BaseDataset`.
    """

    def __init__(self, num_frames=200, split='train', seed=0, lidar=None, scene=None, noise=None, cache=False,
                 pipeline=(), metainfo=None, test_mode=False, lazy_init=False, indices=None, max_refetch=1000):
        if split not in SPLITS:
            raise ValueError(f'SyntheticLidarDataset: split must be one of {list(SPLITS)}, got {split!r}')
        if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 0:
            raise ValueError(f'SyntheticLidarDataset: num_frames must be an int >= 0, got {num_frames!r}')
        self.num_frames, self.split, self.seed = num_frames, split, int(seed)
        self.lidar = _options(LidarSpec, 'lidar', lidar)
        self.noise = _options(SensorNoise, 'noise', noise)
        self._scene_cfg = scene
        self._cache = {} if cache else None
        super().__init__(pipeline=pipeline, metainfo=metainfo, test_mode=test_mode, lazy_init=lazy_init,
                         indices=indices, serialize_data=False, max_refetch=max_refetch)
        self.scene = _options(WorldSpec, 'scene', scene)
        unknown = [c for c in self.classes if c not in ROAD_USERS]
        if unknown:
            raise ValueError(f'SyntheticLidarDataset: classes {unknown} are not road users of the simulated world; '
                             f'expected some of {sorted(ROAD_USERS)}')

    def load_data_list(self):
        """``num_frames`` entries ``dict(frame_index=i)``; frames are generated in :meth:`load_sample`."""
        return [dict(frame_index=i) for i in range(self.num_frames)]

    def generate(self, frame_index):
        """Render frame ``frame_index`` of this split (numpy arrays, see :func:`render_frame`)."""
        rng = frame_rng(self.seed, SPLITS[self.split], frame_index)
        return render_frame(rng, self.scene, self.lidar, self.noise, self.classes)

    def load_sample(self, info):
        """Render (or take from the cache) frame ``info['frame_index']``.

        Returns:
            dict: the arrays of :func:`~fsdlite.datasets.sim.render_frame` (copies) plus ``num_points_in_gt`` (M,)
            int64 and ``split``; skipped objects are reported.
        """
        key = info['frame_index']
        if self._cache is not None and key in self._cache:
            frame = self._cache[key]
        else:
            frame = self.generate(key)
            points, boxes = torch.from_numpy(frame['points']), torch.from_numpy(frame['gt_bboxes_3d'])
            frame['num_points_in_gt'] = count_points_in_boxes(points, boxes)
            if self._cache is not None:
                self._cache[key] = frame
        out = {k: _copied(v) for k, v in frame.items()}  # the cache stays intact
        out['split'] = self.split
        skipped = int(out.get('num_skipped_objects', 0))
        report_dropped(self, 'num_skipped_objects', skipped, lambda: f'{skipped} road users of frame {key} '
                       f'({self.split}) found no free spot and were left out of the street')
        return out

    def statistics(self, num_frames=None):
        """Mean points per frame, boxes per class and empty boxes over the first frames (a quick check).

        Returns:
            dict: ``points_per_frame``, ``boxes_per_class`` (dict), ``empty_boxes``, ``frames``.
        """
        n = min(len(self), num_frames or len(self))
        points = empty = 0
        per_class = dict.fromkeys(self.classes, 0)
        for i in range(n):
            raw = self.raw_results(i)
            points += len(raw['points'])
            empty += int((raw['num_points_in_gt'] == 0).sum())
            for label in raw['gt_labels_3d'].tolist():
                per_class[self.classes[label]] += 1
        stats = dict(frames=n, points_per_frame=points / max(n, 1), boxes_per_class=per_class, empty_boxes=empty)
        print_log(f'SyntheticLidarDataset({self.split}): {stats}', logger='current')
        return stats
