"""Shared base of the lidar detection/segmentation datasets (synthetic scenes, KITTI format).

A subclass implements :meth:`LidarDetDataset.load_sample`, returning the raw arrays of one frame;
the base turns them into the results dict of :mod:`fsdlite.datasets.transforms._fields` and runs
the pipeline, which ends with ``Pack3DDetInputs`` so that ``dataset[i]`` is
``dict(inputs=dict(points=(N, C) float32), data_samples=Det3DDataSample)``.
"""
import copy

import numpy as np
import torch
from mmengine.dataset import BaseDataset

from ..registry import TRANSFORMS
from ..utils.errors import DataError
from fsdlite.utils.drop_report import report_dropped
from .transforms._fields import COUNTERS

DEFAULT_CLASSES = ('Car', 'Pedestrian', 'Cyclist')


def build_pipeline(pipeline):
    """Build transform configs with fsdlite's TRANSFORMS (no default scope needed); callables pass through."""
    built = []
    for t in pipeline or ():
        if isinstance(t, dict):
            built.append(TRANSFORMS.build(copy.deepcopy(dict(t))))
        elif callable(t):
            built.append(t)
        else:
            raise TypeError(f'pipeline entries must be transform config dicts or callables, got {t!r}')
    return built


def _tensor(value, dtype):
    return value.to(dtype) if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value), dtype=dtype)


class LidarDetDataset(BaseDataset):
    """Base class: ``metainfo['classes']`` names the annotated classes (default Car, Pedestrian, Cyclist).

    Args:
        pipeline (sequence): transform configs (built with fsdlite's TRANSFORMS) or callables.
        **kwargs: forwarded to :class:`mmengine.dataset.BaseDataset`.
    """
    METAINFO = dict(classes=DEFAULT_CLASSES)

    def __init__(self, pipeline=(), **kwargs):
        super().__init__(pipeline=build_pipeline(pipeline), **kwargs)

    def _data_error(self, exc, where):
        """A reader's ValueError (bad label line, calib, info file, point file) as a :class:`DataError`, which the
        tools print as one line; the original stays chained for debugging."""
        if isinstance(exc, DataError):
            return exc
        return DataError(f'{type(self).__name__} {where}: {exc}')

    def full_init(self):
        """mmengine's ``full_init`` (reads the data list); a malformed annotation raises :class:`DataError`."""
        try:
            super().full_init()
        except ValueError as exc:
            raise self._data_error(exc, 'could not read its annotations') from exc

    @property
    def classes(self):
        """Tuple of annotated class names; label ``len(classes)`` is background."""
        return tuple(self.metainfo['classes'])

    def load_sample(self, info):
        """Raw frame for one data-list entry.

        Returns:
            dict: ``points`` (N, C), ``gt_bboxes_3d`` (M, 7), ``gt_labels_3d`` (M,), optional
            ``pts_semantic_mask`` / ``pts_instance_mask`` (N,), ``num_points_in_gt`` (M,), counters and
            any extra metainfo entries.
        """
        raise NotImplementedError

    def raw_results(self, idx):
        """The results dict of sample ``idx`` before the pipeline (used by the GT-database tool)."""
        info = self.get_data_info(idx)
        results = dict(info)
        try:
            results.update(self.load_sample(info))
        except ValueError as exc:
            raise self._data_error(exc, f'sample {idx}') from exc
        results['points'] = _tensor(results['points'], torch.float32)
        results['gt_bboxes_3d'] = _tensor(results.get('gt_bboxes_3d', np.zeros((0, 7))), torch.float32).reshape(-1, 7)
        results['gt_labels_3d'] = _tensor(results.get('gt_labels_3d', np.zeros(0)), torch.long)
        for key in ('pts_semantic_mask', 'pts_instance_mask', 'num_points_in_gt'):
            if key in results:
                results[key] = _tensor(results[key], torch.long)
        for key in COUNTERS:
            results[key] = int(results.get(key, 0))
        results['classes'] = self.classes
        results['num_classes'] = len(self.classes)
        results['box_origin'] = 'bottom'
        results['num_pts_feats'] = results['points'].shape[1]
        return results

    def prepare_data(self, idx):
        """Raw results of sample ``idx`` passed through the pipeline.

        A pipeline that returns None skips the sample (mmengine's ``__getitem__`` then draws another one,
        or raises in test mode); skips are counted in ``dropped_totals['skipped_samples']`` and the first
        one is logged as a warning.
        """
        data = self.pipeline(self.raw_results(idx))
        if data is None:
            report_dropped(self, 'skipped_samples', 1, lambda: f'skipped sample {idx}: the pipeline returned None '
                           '(mmengine draws another sample in its place)', in_metainfo=False)
        return data
