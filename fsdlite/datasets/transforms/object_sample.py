"""ObjectSample: paste ground-truth objects from a database into the scene (GT sampling)."""
import numpy as np
import torch
from mmcv.transforms import BaseTransform

from ...registry import TRANSFORMS
from ...structures.boxes import bev_overlap
from ..gt_database import GTDatabase
from fsdlite.ops import points_in_boxes
from fsdlite.utils.drop_report import report_dropped
from ._fields import count_dropped, select_points


def _per_class(name, value, classes):
    if isinstance(value, (int, float)):
        return {c: int(value) for c in classes}
    unknown = [c for c in value if c not in classes]
    if unknown:
        raise ValueError(f'ObjectSample: {name} names classes {unknown} that the database lacks ({tuple(classes)})')
    if any(int(v) < 0 for v in value.values()):
        raise ValueError(f'ObjectSample: {name} values must be >= 0, got {dict(value)}')
    return {c: int(v) for c, v in value.items()}


@TRANSFORMS.register_module()
class ObjectSample(BaseTransform):
    """Add objects (their points and boxes) sampled from a GT database built by ``tools/create_gt_database.py``.

    Per class, ``sample_groups[c]`` database objects are drawn (or, with ``fill=True``, as many as needed
    to reach that many objects of the class in the scene, as mmdet3d does).  A drawn object is rejected
    when its BEV footprint overlaps an existing box or an object accepted before it
    (:func:`fsdlite.structures.boxes.bev_overlap`: rotated-rectangle test when ``fsdlite.ops.boxes_iou_bev``
    exists).  Scene points inside the accepted boxes are removed (counted in ``num_points_replaced``);
    the objects' points are appended with their class in ``pts_semantic_mask`` and their new box row in
    ``pts_instance_mask``.  Objects keep their original position (ground heights of frames must agree).
    ``num_sampled_objects`` records how many were pasted, ``num_rejected_objects`` how many drawn objects
    overlapped and ``num_unavailable_objects`` how many requested objects the database could not supply
    (its pool of a class is smaller).  Database objects with fewer than ``min_points`` points are never
    drawn (reported when the transform is built).  Every drop is reported (a warning the first time, totals
    in :attr:`dropped_totals`).

    Args:
        db_path (str): ``.npz`` database.
        sample_groups (dict | int): class name -> number of objects to draw per frame.
        min_points (dict | int): only objects with at least this many points are drawn.
        fill (bool): treat ``sample_groups`` as a target count per class instead of a number to add.
        margin (float): extra BEV gap (m) required around pasted objects.
    """

    def __init__(self, db_path, sample_groups, min_points=5, fill=False, margin=0.0):
        self.db_path = db_path
        self.db = GTDatabase.load(db_path)
        self.sample_groups = _per_class('sample_groups', sample_groups, self.db.classes)
        self.min_points = _per_class('min_points', min_points, self.db.classes)
        self.fill, self.margin = bool(fill), float(margin)
        enough = self.db.num_points >= torch.tensor([self.min_points.get(self.db.classes[int(l)], 0)
                                                     for l in self.db.labels], dtype=torch.long)
        self.pools = {c: torch.nonzero((self.db.labels == i) & enough).flatten()
                      for i, c in enumerate(self.db.classes)}
        few = {c: int(((self.db.labels == i) & ~enough).sum()) for i, c in enumerate(self.db.classes)}
        report_dropped(self, 'database_objects_below_min_points', sum(few.values()),
                       lambda: f'{sum(few.values())} of {len(self.db)} objects of {db_path!r} have fewer than '
                               f'min_points={self.min_points} points and are never drawn (per class {few}); '
                               f'pool sizes {({c: len(p) for c, p in self.pools.items()})}',
                       in_metainfo=False)

    def _draw(self, results):
        """Candidate database indices, in drawing order, and the number the pools could not supply."""
        names = results['classes']
        picks, unavailable = [], 0
        for name, wanted in self.sample_groups.items():
            if name not in names:
                raise ValueError(f'ObjectSample: class {name!r} is not a class of the dataset {tuple(names)}')
            if self.fill:
                wanted -= int((results['gt_labels_3d'] == names.index(name)).sum())
            pool = self.pools[name]
            n = min(max(wanted, 0), len(pool))
            unavailable += max(wanted, 0) - n
            if n:
                picks.append(pool[torch.from_numpy(np.random.choice(len(pool), n, replace=False))])
        return (torch.cat(picks) if picks else torch.zeros(0, dtype=torch.long)), unavailable

    def transform(self, results):
        """Draw database objects, reject overlapping ones and paste the accepted ones into the results.

        Sets ``num_sampled_objects``, ``num_rejected_objects`` and ``num_unavailable_objects``; appends to the
        per-point keys and to ``gt_bboxes_3d`` / ``gt_labels_3d`` / ``num_points_in_gt``.
        """
        candidates, unavailable = self._draw(results)
        results['num_sampled_objects'] = 0
        results['num_rejected_objects'] = 0
        count_dropped(self, results, 'num_unavailable_objects', unavailable, unavailable + len(candidates),
                      'requested objects: the database pools are too small '
                      f'({({c: len(p) for c, p in self.pools.items()})} objects with >= min_points points)')
        if len(candidates) == 0:
            return results
        boxes = self.db.boxes[candidates]
        existing = results['gt_bboxes_3d']
        blocked = bev_overlap(boxes, existing, self.margin).any(dim=1) if len(existing) else \
            torch.zeros(len(boxes), dtype=torch.bool)
        mutual = bev_overlap(boxes, boxes, self.margin)
        accepted = []
        for i in range(len(boxes)):  # greedy, in drawing order
            if not blocked[i] and not any(bool(mutual[i, j]) for j in accepted):
                accepted.append(i)
        count_dropped(self, results, 'num_rejected_objects', len(boxes) - len(accepted), len(boxes),
                      f'drawn objects: their BEV footprint (margin={self.margin}) overlaps a box of the scene or '
                      'an object pasted before')
        if not accepted:
            return results
        chosen, new_boxes = candidates[accepted], boxes[accepted]
        self._paste(results, chosen, new_boxes)
        return results

    def _paste(self, results, chosen, new_boxes):
        points = results['points']
        if self.db.points.shape[1] != points.shape[1]:
            raise ValueError(f'ObjectSample: database points have {self.db.points.shape[1]} columns but the scene '
                             f'has {points.shape[1]}; build the database with the same point features')
        inside = points_in_boxes(points, new_boxes) >= 0
        count_dropped(self, results, 'num_points_replaced', int(inside.sum()), len(inside),
                      'scene points: they lie inside pasted objects')
        select_points(results, ~inside)
        names = results['classes']
        labels = torch.tensor([names.index(self.db.classes[int(self.db.labels[i])]) for i in chosen],
                              dtype=torch.long)
        object_points = [self.db.object_points(int(i)) for i in chosen]
        sizes = torch.tensor([len(p) for p in object_points], dtype=torch.long)
        first_row = len(results['gt_bboxes_3d'])
        results['points'] = torch.cat([results['points'], *object_points])
        if 'pts_semantic_mask' in results:
            results['pts_semantic_mask'] = torch.cat([results['pts_semantic_mask'], labels.repeat_interleave(sizes)])
        if 'pts_instance_mask' in results:
            rows = torch.arange(first_row, first_row + len(chosen)).repeat_interleave(sizes)
            results['pts_instance_mask'] = torch.cat([results['pts_instance_mask'], rows])
        results['gt_bboxes_3d'] = torch.cat([results['gt_bboxes_3d'], new_boxes.to(results['gt_bboxes_3d'].dtype)])
        results['gt_labels_3d'] = torch.cat([results['gt_labels_3d'], labels])
        if 'num_points_in_gt' in results:
            results['num_points_in_gt'] = torch.cat([results['num_points_in_gt'], sizes])
        results['num_sampled_objects'] = len(chosen)

    def __repr__(self):
        return (f'{type(self).__name__}(db_path={self.db_path!r}, sample_groups={self.sample_groups}, '
                f'min_points={self.min_points}, fill={self.fill}, margin={self.margin})')
