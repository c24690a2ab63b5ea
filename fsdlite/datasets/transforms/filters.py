"""Range and class filters for points and boxes; every drop is counted in the results and reported
(:func:`fsdlite.utils.drop_report.report_dropped`: a warning the first time, totals in ``dropped_totals``)."""
import torch
from mmcv.transforms import BaseTransform

from fsdlite.ops import points_in_boxes_all

from ...registry import TRANSFORMS
from ...structures.boxes import limit_period
from ._fields import count_dropped, num_classes, select_boxes, select_points


def _checked_range(name, point_cloud_range):
    values = [float(v) for v in point_cloud_range]
    if len(values) != 6 or not all(lo < hi for lo, hi in zip(values[:3], values[3:])):
        raise ValueError(f'{name}: point_cloud_range must be [x_min, y_min, z_min, x_max, y_max, z_max] with '
                         f'min < max, got {point_cloud_range!r}')
    return values


@TRANSFORMS.register_module()
class PointsRangeFilter(BaseTransform):
    """Keep points strictly inside ``point_cloud_range`` (non-finite points fall outside).

    Dropped points are added to ``results['num_points_filtered']``; per-point masks follow.

    Args:
        point_cloud_range (sequence): [x_min, y_min, z_min, x_max, y_max, z_max] (m).
    """

    def __init__(self, point_cloud_range):
        self.point_cloud_range = _checked_range('PointsRangeFilter', point_cloud_range)

    def transform(self, results):
        """Drop points (and their mask rows) outside the range; counts them in ``num_points_filtered``."""
        xyz = results['points'][:, :3]
        lo = xyz.new_tensor(self.point_cloud_range[:3])
        hi = xyz.new_tensor(self.point_cloud_range[3:])
        keep = ((xyz > lo) & (xyz < hi)).all(dim=1)
        count_dropped(self, results, 'num_points_filtered', int((~keep).sum()), len(keep),
                      f'points outside point_cloud_range={self.point_cloud_range}')
        return select_points(results, keep)

    def __repr__(self):
        return f'{type(self).__name__}(point_cloud_range={self.point_cloud_range})'


@TRANSFORMS.register_module()
class ObjectRangeFilter(BaseTransform):
    """Keep boxes whose BEV centre lies strictly inside the x/y extent of ``point_cloud_range``.

    Kept yaws are wrapped to [-pi, pi); dropped boxes are added to ``results['num_objects_filtered']``
    and their points become background.

    Args:
        point_cloud_range (sequence): [x_min, y_min, z_min, x_max, y_max, z_max] (m).
    """

    def __init__(self, point_cloud_range):
        self.point_cloud_range = _checked_range('ObjectRangeFilter', point_cloud_range)

    def transform(self, results):
        """Drop boxes whose BEV centre is outside the range and wrap the kept yaws to [-pi, pi)."""
        boxes = results['gt_bboxes_3d']
        x0, y0, _, x1, y1, _ = self.point_cloud_range
        keep = (boxes[:, 0] > x0) & (boxes[:, 1] > y0) & (boxes[:, 0] < x1) & (boxes[:, 1] < y1)
        count_dropped(self, results, 'num_objects_filtered', int((~keep).sum()), len(keep),
                      f'boxes with BEV centre outside point_cloud_range={self.point_cloud_range}')
        select_boxes(results, keep)
        boxes = results['gt_bboxes_3d'].clone()
        boxes[:, 6] = limit_period(boxes[:, 6])
        results['gt_bboxes_3d'] = boxes
        return results

    def __repr__(self):
        return f'{type(self).__name__}(point_cloud_range={self.point_cloud_range})'


@TRANSFORMS.register_module()
class ObjectNameFilter(BaseTransform):
    """Keep boxes whose class name (``results['classes'][label]``) is in ``classes``.

    Labels keep their dataset indices; dropped boxes are counted in ``num_objects_filtered`` and
    their points become background.

    Args:
        classes (sequence of str): class names to keep.
    """

    def __init__(self, classes):
        if isinstance(classes, str) or not all(isinstance(c, str) for c in classes):
            raise TypeError(f'ObjectNameFilter: classes must be a sequence of class names, got {classes!r}')
        self.classes = tuple(classes)

    def transform(self, results):
        """Drop boxes whose class is not in ``classes``; raises ValueError for a class the dataset lacks."""
        names = results['classes']
        unknown = [c for c in self.classes if c not in names]
        if unknown:
            raise ValueError(f'ObjectNameFilter: classes {unknown} are not classes of the dataset {tuple(names)}')
        allowed = torch.zeros(num_classes(results) + 1, dtype=torch.bool)
        allowed[[names.index(c) for c in self.classes]] = True
        labels = results['gt_labels_3d']
        keep = allowed[labels.clamp(0, len(names))] & (labels >= 0)
        count_dropped(self, results, 'num_objects_filtered', int((~keep).sum()), len(keep),
                      f'boxes of classes not in {self.classes}')
        return select_boxes(results, keep)

    def __repr__(self):
        return f'{type(self).__name__}(classes={self.classes})'


@TRANSFORMS.register_module()
class ObjectMinPointsFilter(BaseTransform):
    """Keep boxes containing at least ``min_points`` of the current points (counted now, with
    ``points_in_boxes_all``); dropped boxes are counted in ``num_objects_filtered`` and their points
    become background.  Useful after range filters, so that unobservable objects are not targets.

    Args:
        min_points (int): minimum number of points inside a kept box.
    """

    def __init__(self, min_points=1):
        if isinstance(min_points, bool) or not isinstance(min_points, int) or min_points < 0:
            raise ValueError(f'ObjectMinPointsFilter: min_points must be an int >= 0, got {min_points!r}')
        self.min_points = min_points

    def transform(self, results):
        """Drop boxes holding fewer than ``min_points`` of ``results['points']``."""
        counts = points_in_boxes_all(results['points'], results['gt_bboxes_3d']).sum(dim=0)
        keep = counts >= self.min_points
        count_dropped(self, results, 'num_objects_filtered', int((~keep).sum()), len(keep),
                      f'boxes with fewer than min_points={self.min_points} points')
        return select_boxes(results, keep)

    def __repr__(self):
        return f'{type(self).__name__}(min_points={self.min_points})'
