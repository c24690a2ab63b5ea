"""Per-sample containers passed between datasets, data preprocessors, models and metrics.

Follows mmdet3d's ``Det3DDataSample`` field names (without importing mmdet3d):

* ``gt_instances_3d`` / ``pred_instances_3d`` (:class:`InstanceData`):
  ``bboxes_3d`` (M, 7) lidar boxes (see :mod:`fsdlite.structures.boxes`), ``labels_3d`` (M,) int64,
  and for predictions ``scores_3d`` (M,).
* ``gt_pts_seg`` / ``pred_pts_seg`` (:class:`PointData`): ``pts_semantic_mask`` (N,) int64 where
  ``0..C-1`` are the classes and ``C`` (= num_classes) is background; predictions may add
  ``pts_scores`` (N, C).
* metainfo: ``sample_idx``, ``num_classes``, ``classes``, and dataset-specific keys
  (``lidar_path``, ``num_filtered_points`` ...).
"""
from mmengine.structures import BaseDataElement, InstanceData


class PointData(BaseDataElement):
    """Per-point fields of one sample (every tensor field has the same first dimension N)."""


class Det3DDataSample(BaseDataElement):
    """One lidar sample's annotations and predictions (mmdet3d-compatible field names)."""

    def _typed(name, kind):  # noqa: N805 - property factory used at class creation only
        def getter(self):
            return getattr(self, f'_{name}')

        def setter(self, value):
            self.set_field(value, f'_{name}', dtype=kind)

        def deleter(self):
            delattr(self, f'_{name}')

        return property(getter, setter, deleter, f'{name} ({kind.__name__})')

    gt_instances_3d = _typed('gt_instances_3d', InstanceData)
    pred_instances_3d = _typed('pred_instances_3d', InstanceData)
    gt_pts_seg = _typed('gt_pts_seg', PointData)
    pred_pts_seg = _typed('pred_pts_seg', PointData)
    del _typed


__all__ = ['Det3DDataSample', 'InstanceData', 'PointData']
