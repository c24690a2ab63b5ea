"""Pack3DDetInputs: the last transform, producing the model-facing sample."""
import torch
from mmcv.transforms import BaseTransform

from ...registry import TRANSFORMS
from ...structures import Det3DDataSample, InstanceData, PointData
from ._fields import DROP_COUNTERS

DEFAULT_META_KEYS = (
    'sample_idx', 'frame_id', 'lidar_path', 'classes', 'num_classes', 'box_origin', 'num_pts_feats', 'lidar2cam',
    'split', 'num_points_in_gt', 'num_points_filtered', 'num_points_invalid', 'num_objects_filtered',
    'num_sampled_objects', 'num_points_replaced', 'num_skipped_objects', 'num_rejected_objects',
    'num_unavailable_objects', 'transformation_3d_flow', 'pcd_rotation_angle', 'pcd_scale_factor', 'pcd_trans',
    'pcd_horizontal_flip', 'pcd_vertical_flip', 'kitti_annos', 'lidar2img', 'image_size', 'street')


@TRANSFORMS.register_module()
class Pack3DDetInputs(BaseTransform):
    """Pack a results dict into ``dict(inputs=dict(points=...), data_samples=Det3DDataSample)``.

    * ``inputs['points']``: (N, C) float32 tensor;
    * ``data_samples.gt_instances_3d``: ``bboxes_3d`` (M, 7) float32 and ``labels_3d`` (M,) int64
      (empty when the results carry no boxes, e.g. a test split);
    * ``data_samples.gt_pts_seg``: ``pts_semantic_mask`` (N,) int64 (``num_classes`` = background) and
      ``pts_instance_mask`` (N,) int64, when present;
    * metainfo: every key of ``meta_keys`` found in the results (1-D tensors become lists), and always the
      drop counters (``_fields.DROP_COUNTERS``) found there, so that no count of dropped data is lost.

    Args:
        keys (sequence): which of 'points', 'gt_bboxes_3d', 'gt_labels_3d', 'pts_semantic_mask',
            'pts_instance_mask' to pack ('points' is required).
        meta_keys (sequence): results keys copied into the metainfo.
    """
    KNOWN_KEYS = ('points', 'gt_bboxes_3d', 'gt_labels_3d', 'pts_semantic_mask', 'pts_instance_mask')

    def __init__(self, keys=KNOWN_KEYS, meta_keys=DEFAULT_META_KEYS):
        unknown = [k for k in keys if k not in self.KNOWN_KEYS]
        if unknown or 'points' not in keys:
            raise ValueError(f'Pack3DDetInputs: keys must include "points" and come from {self.KNOWN_KEYS}, '
                             f'got {tuple(keys)}')
        self.keys, self.meta_keys = tuple(keys), tuple(meta_keys)
        self._packed_meta_keys = self.meta_keys + tuple(k for k in DROP_COUNTERS if k not in self.meta_keys)

    def transform(self, results):
        """Pack the results into ``dict(inputs=dict(points=(N, C) float32), data_samples=Det3DDataSample)``."""
        points = torch.as_tensor(results['points'], dtype=torch.float32)
        sample = Det3DDataSample()
        gt = InstanceData()
        boxes = results.get('gt_bboxes_3d') if 'gt_bboxes_3d' in self.keys else None
        labels = results.get('gt_labels_3d') if 'gt_labels_3d' in self.keys else None
        gt.bboxes_3d = torch.as_tensor(boxes, dtype=torch.float32) if boxes is not None else torch.zeros(0, 7)
        gt.labels_3d = torch.as_tensor(labels, dtype=torch.long) if labels is not None else \
            torch.zeros(len(gt.bboxes_3d), dtype=torch.long)
        sample.gt_instances_3d = gt
        seg = PointData()
        for key in ('pts_semantic_mask', 'pts_instance_mask'):
            if key in self.keys and key in results:
                setattr(seg, key, torch.as_tensor(results[key], dtype=torch.long))
        sample.gt_pts_seg = seg
        meta = {}
        for key in self._packed_meta_keys:
            if key in results:
                value = results[key]
                meta[key] = value.tolist() if isinstance(value, torch.Tensor) and value.dim() == 1 else value
        sample.set_metainfo(meta)
        return dict(inputs=dict(points=points), data_samples=sample)

    def __repr__(self):
        return f'{type(self).__name__}(keys={self.keys}, meta_keys={self.meta_keys})'
