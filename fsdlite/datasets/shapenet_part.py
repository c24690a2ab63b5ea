"""ShapeNet-Part reader for a category ``.npz`` with ``<split>_pos``, ``<split>_normal``,
``<split>_part_label`` and ``<split>_shape_index`` (e.g. the 'Cap' subset in ``shared/data/shapenet_cap``).

One shape per sample: points ``(N, 3)`` (or ``(N, 6)`` with normals) and part labels remapped to
``0..P-1`` in the order of ``part_ids`` (default: the sorted part ids found in the file, e.g. Cap's
6, 7 -> 0, 1), in ``gt_pts_seg.pts_semantic_mask``.
"""
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..registry import DATASETS
from ..structures import Det3DDataSample, PointData


@DATASETS.register_module()
class ShapeNetPartDataset(Dataset):
    """Shapes of one ShapeNet-Part category split.

    Args:
        path (str): category ``.npz``.
        split (str): key prefix, e.g. 'val' or 'test'.
        part_ids (Sequence[int], optional): global part ids of this category (label i = part_ids[i]).
        with_normals (bool): append the normals as 3 feature columns.
    """

    def __init__(self, path, split='test', part_ids=None, with_normals=False):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f'ShapeNet-Part file {str(path)!r} does not exist')
        keys = [f'{split}_{k}' for k in ('pos', 'normal', 'part_label', 'shape_index')]
        with np.load(path) as data:
            missing = [k for k in keys if k not in data.files]
            if missing:
                splits = sorted({k.rsplit('_', 1)[0] for k in data.files if k.endswith('_pos')})
                raise ValueError(f'{path}: split {split!r} lacks {missing}; splits in the file: {splits}')
            pos, normal, parts, shape = (data[k] for k in keys)
        if not (pos.ndim == 2 and pos.shape[1] == 3 and normal.shape == pos.shape
                and parts.shape == shape.shape == (len(pos),)):
            raise ValueError(f'{path}: inconsistent shapes pos {pos.shape}, normal {normal.shape}, '
                             f'part_label {parts.shape}, shape_index {shape.shape}')
        found = sorted(int(p) for p in np.unique(parts))
        self.part_ids = tuple(int(p) for p in part_ids) if part_ids is not None else tuple(found)
        unknown = sorted(set(found) - set(self.part_ids))
        if unknown:
            raise ValueError(f'{path}: part ids {unknown} are not in part_ids={self.part_ids}')
        lookup = np.full(max(self.part_ids + tuple(found)) + 1, -1, np.int64)
        lookup[list(self.part_ids)] = np.arange(len(self.part_ids))
        self.labels = lookup[parts.astype(np.int64)]
        feats = np.concatenate([pos, normal], 1) if with_normals else pos
        self.points = feats.astype(np.float32)
        order = np.argsort(shape, kind='stable')
        ids, counts = np.unique(shape[order], return_counts=True)
        self.shapes = np.split(order, np.cumsum(counts)[:-1])
        self.shape_ids = ids
        self.metainfo = dict(classes=tuple(f'part_{p}' for p in self.part_ids))

    def __len__(self):
        return len(self.shapes)

    def __getitem__(self, index):
        if not 0 <= index < len(self.shapes):
            raise IndexError(f'ShapeNetPartDataset: index {index} out of range for {len(self.shapes)} shapes')
        rows = self.shapes[index]
        sample = Det3DDataSample(metainfo=dict(sample_idx=index, shape_index=int(self.shape_ids[index]),
                                               classes=self.metainfo['classes']))
        sample.gt_pts_seg = PointData(pts_semantic_mask=torch.from_numpy(self.labels[rows]))
        return dict(inputs=dict(points=torch.from_numpy(self.points[rows])), data_samples=sample)
