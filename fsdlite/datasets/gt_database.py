"""Ground-truth database: the points inside every annotated box of a training set, for ObjectSample.

Stored as one ``.npz`` (no pickle): ``points`` (P, C) float32 with xyz relative to the box's bottom
centre, ``offsets`` (K+1,) int64 (object k owns rows ``offsets[k]:offsets[k+1]``), ``boxes`` (K, 7)
float32 bottom-centre lidar boxes, ``labels`` (K,) int64 indices into ``classes``, ``frames`` (K,)
int64 dataset index of the source frame, ``classes`` (names) and ``meta`` (a JSON string).
"""
import json
import os

import numpy as np
import torch
from mmengine.utils import track_iter_progress

from fsdlite.ops import points_in_boxes_all

FORMAT_VERSION = 1


class GTDatabase:
    """Objects cut out of lidar frames.

    Args:
        points (Tensor): (P, C) float32, xyz relative to each object's box bottom centre.
        offsets (Tensor): (K+1,) int64 row offsets of the objects in ``points``.
        boxes (Tensor): (K, 7) float32 boxes; labels (Tensor): (K,) int64; frames (Tensor): (K,) int64.
        classes (sequence of str): class names of the labels.
        meta (dict): free-form provenance (config, dataset type, number of frames ...).
    """

    def __init__(self, points, offsets, boxes, labels, frames, classes, meta=None):
        k = len(boxes)
        if offsets.shape != (k + 1,) or labels.shape != (k,) or frames.shape != (k,) or \
                int(offsets[-1]) != len(points):
            raise ValueError(f'GTDatabase: inconsistent arrays: {k} boxes, offsets {tuple(offsets.shape)} ending at '
                             f'{int(offsets[-1]) if len(offsets) else None}, {len(points)} points, labels '
                             f'{tuple(labels.shape)}, frames {tuple(frames.shape)}')
        self.points, self.offsets, self.boxes = points, offsets, boxes
        self.labels, self.frames = labels, frames
        self.classes, self.meta = tuple(classes), dict(meta or {})

    def __len__(self):
        return len(self.boxes)

    @property
    def num_points(self):
        """(K,) int64 points per object."""
        return self.offsets[1:] - self.offsets[:-1]

    def object_points(self, index):
        """(n, C) points of object ``index`` in the frame they came from (absolute coordinates)."""
        pts = self.points[self.offsets[index]:self.offsets[index + 1]].clone()
        pts[:, :3] += self.boxes[index, :3]
        return pts

    def counts(self):
        """Objects per class name."""
        return {name: int((self.labels == i).sum()) for i, name in enumerate(self.classes)}

    # ------------------------------------------------------------------------------ building
    @classmethod
    def from_dataset(cls, dataset, num_frames=None, meta=None, progress=True):
        """Cut every annotated box out of the first ``num_frames`` raw frames of ``dataset``.

        ``dataset`` must provide ``raw_results(i)`` (the lidar datasets do) and ``classes``.  A point lying
        in two overlapping boxes is stored with both.
        """
        n = len(dataset) if num_frames is None else min(int(num_frames), len(dataset))
        chunks, boxes, labels, frames, counts = [], [], [], [], []
        indices = range(n)
        if progress and n:
            indices = track_iter_progress(list(indices))
        for i in indices:
            raw = dataset.raw_results(i)
            pts, b = raw['points'], raw['gt_bboxes_3d']
            inside = points_in_boxes_all(pts, b)
            for k in range(len(b)):
                obj = pts[inside[:, k]].clone()
                obj[:, :3] -= b[k, :3]
                chunks.append(obj)
                counts.append(len(obj))
            boxes.append(b)
            labels.append(raw['gt_labels_3d'])
            frames.append(torch.full((len(b),), i, dtype=torch.long))
        width = chunks[0].shape[1] if chunks else 4
        offsets = torch.zeros(len(counts) + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(torch.tensor(counts, dtype=torch.long), 0)
        meta = dict(meta or {}, num_frames=n, dataset=type(dataset).__name__)
        return cls(torch.cat(chunks) if chunks else torch.zeros(0, width), offsets,
                   torch.cat(boxes) if boxes else torch.zeros(0, 7),
                   torch.cat(labels) if labels else torch.zeros(0, dtype=torch.long),
                   torch.cat(frames) if frames else torch.zeros(0, dtype=torch.long), dataset.classes, meta)

    # ------------------------------------------------------------------------------ files
    def save(self, path):
        """Write the database to ``path`` (``.npz``)."""
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        np.savez(path, points=self.points.numpy(), offsets=self.offsets.numpy(), boxes=self.boxes.numpy(),
                 labels=self.labels.numpy(), frames=self.frames.numpy(), classes=np.array(self.classes),
                 meta=np.array(json.dumps(dict(self.meta, format_version=FORMAT_VERSION))))

    @classmethod
    def load(cls, path):
        """Read a database written by :meth:`save`."""
        if not os.path.isfile(path):
            raise FileNotFoundError(f'GT database {str(path)!r} does not exist; build it with '
                                    f'`python tools/create_gt_database.py CONFIG --out DIR`')
        with np.load(path, allow_pickle=False) as f:
            missing = {'points', 'offsets', 'boxes', 'labels', 'frames', 'classes', 'meta'} - set(f.files)
            if missing:
                raise ValueError(f'{str(path)!r} is not a GT database (missing {sorted(missing)})')
            return cls(torch.from_numpy(f['points']), torch.from_numpy(f['offsets']), torch.from_numpy(f['boxes']),
                       torch.from_numpy(f['labels']), torch.from_numpy(f['frames']),
                       [str(c) for c in f['classes']], json.loads(str(f['meta'])))
