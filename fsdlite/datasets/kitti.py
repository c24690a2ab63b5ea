"""KittiDataset: KITTI object-format lidar frames (standard folder layout or an mmdet3d v2 info .pkl)."""
import os
import os.path as osp
from collections import Counter

import numpy as np
import torch
from mmengine.logging import print_log

from ..registry import DATASETS
from ..structures.boxes import camera_to_lidar_boxes
from ..structures.camera import KITTI_IMAGE_SIZE, camera_fov_mask, lidar2img_from_calib
from .kitti_format import lidar2cam_from_calib, read_calib, read_info_pkl, read_label
from fsdlite.ops import points_in_boxes, points_in_boxes_all
from fsdlite.utils.drop_report import report_dropped
from .lidar_det_dataset import LidarDetDataset
from .transforms.loading import drop_non_finite, load_points


def kitti_annotations(objects, lidar2cam):
    """Every object of a label file as the KITTI scoring reads it (:mod:`fsdlite.evaluation.functional.kitti_eval`).

    Args:
        objects (list[dict]): :func:`~fsdlite.datasets.kitti_format.read_label` entries.
        lidar2cam (array): (4, 4) lidar -> rectified camera.
    Returns:
        dict: ``name`` (K,) object array of KITTI types (DontCare included), ``box_lidar`` (K, 7) bottom-centre
        lidar boxes (DontCare rows are meaningless), ``bbox`` (K, 4) image boxes, ``truncated`` (K,), ``occluded``
        (K,) int.
    """
    cam = torch.tensor(np.array([o['box_camera'] for o in objects], dtype=np.float64).reshape(-1, 7))
    return dict(name=np.array([o['name'] for o in objects], dtype=object).reshape(-1),
                box_lidar=camera_to_lidar_boxes(cam, lidar2cam).numpy(),
                bbox=np.array([o.get('bbox', (0.0,) * 4) for o in objects], dtype=np.float64).reshape(-1, 4),
                truncated=np.array([o.get('truncated', 0.0) for o in objects], dtype=np.float64).reshape(-1),
                occluded=np.array([o.get('occluded', 0) for o in objects], dtype=np.int64).reshape(-1))


@DATASETS.register_module()
class KittiDataset(LidarDetDataset):
    """KITTI object detection frames with lidar boxes and per-point labels derived from them.

    Two sources:

    * ``ann_file`` ending in ``.pkl``: an mmdet3d v2 info file; point files are
      ``data_root/data_prefix['pts']/<lidar_path>``;
    * otherwise the standard layout ``data_root/data_prefix['pts']/<id>.bin``, ``.../label/<id>.txt``,
      ``.../calib/<id>.txt`` for the ids listed in ``ann_file`` (a split file, one id per line), or for
      every ``.bin`` in the point folder when ``ann_file`` is empty.

    Camera boxes become bottom-centre lidar boxes (``inv(R0_rect @ Tr_velo_to_cam)``; (l, h, w) -> (l, w, h);
    yaw = -ry - pi/2).  Objects whose type is not in ``metainfo['classes']`` (DontCare, Van, Misc, ...)
    are not targets and are counted (per sample in ``num_objects_filtered``, per type in :attr:`dropped_objects`);
    every object, DontCare regions included, stays in the metainfo ``kitti_annos`` with ``lidar2img`` (the left
    colour camera's ``P2 @ R0_rect @ Tr_velo_to_cam``) for KITTI's own scoring.
    With ``camera_fov=True`` only the points that project into the left colour camera's image are kept, as
    mmdet3d's ``velodyne_reduced`` (KITTI labels only objects in that view); the others are counted in
    ``num_points_out_of_view`` and reported.
    Non-finite points are dropped, counted in ``num_points_invalid`` and reported (a warning the first time,
    totals in :attr:`dropped_totals`).  ``pts_semantic_mask`` /
    ``pts_instance_mask`` come from ``points_in_boxes`` (lowest box index wins on overlap).

    Args:
        data_root (str): dataset root.
        ann_file (str): info ``.pkl``, split ``.txt`` or '' (list the point folder); relative to ``data_root``.
        data_prefix (dict): ``pts``, ``label``, ``calib`` sub-folders (relative to ``data_root``).
        load_dim (int): float32 values per point in the files; ``use_dim`` (int | list): columns kept.
        camera_fov (bool): keep only the points in the camera's field of view (for raw velodyne folders).
        image_size (tuple): (width, height) of the camera image when the info does not say (KITTI: 1242 x 375).
        pipeline, metainfo, test_mode, lazy_init, indices: as :class:`mmengine.dataset.BaseDataset`.
            Without labels (test_mode only) samples have no boxes.
    """

    def __init__(self, data_root='', ann_file='', data_prefix=None, load_dim=4, use_dim=4, camera_fov=False,
                 image_size=KITTI_IMAGE_SIZE, pipeline=(), metainfo=None, test_mode=False, lazy_init=False,
                 indices=None, max_refetch=1000):
        prefix = dict(pts='training/velodyne', label='training/label_2', calib='training/calib')
        prefix.update(data_prefix or {})
        self.load_dim, self.use_dim = int(load_dim), use_dim
        if not isinstance(camera_fov, bool):
            raise TypeError(f'KittiDataset: camera_fov must be True or False, got {camera_fov!r}')
        size = tuple(image_size) if isinstance(image_size, (list, tuple)) else ()
        if len(size) != 2 or not all(isinstance(v, (int, float)) and v > 0 for v in size):
            raise ValueError(f'KittiDataset: image_size must be (width, height) in pixels, got {image_size!r}')
        self.camera_fov, self.image_size = camera_fov, size
        self.dropped_objects = Counter()
        super().__init__(data_root=data_root, ann_file=ann_file, data_prefix=prefix, pipeline=pipeline,
                         metainfo=metainfo, test_mode=test_mode, lazy_init=lazy_init, indices=indices,
                         serialize_data=False, max_refetch=max_refetch)

    # ---------------------------------------------------------------------------------- data list
    def load_data_list(self):
        """One dict per frame: ``lidar_path``, ``lidar2cam``, ``lidar2img`` (when the calib has P2), ``image_size``,
        ``kitti_annos``, and the target objects as ``gt_bboxes_3d`` (M, 7), ``gt_labels_3d`` (M,) and
        ``num_objects_filtered``; logs the non-target object types once."""
        if str(self.ann_file).endswith('.pkl'):
            frames = read_info_pkl(self.ann_file)
            for f in frames:
                f['lidar_path'] = osp.join(self.data_prefix['pts'], f.pop('lidar_file'))
        else:
            frames = [self._layout_frame(i) for i in self._frame_ids()]
        for f in frames:
            f.setdefault('image_size', self.image_size)
            f['kitti_annos'] = kitti_annotations(f['objects'], f['lidar2cam'])
            f['gt_bboxes_3d'], f['gt_labels_3d'], f['num_objects_filtered'] = self._annotations(f)
            if self.camera_fov and 'lidar2img' not in f:
                raise ValueError(f"KittiDataset: camera_fov=True needs the camera's P2 (calib) for frame "
                                 f"{f['frame_id']}; the info/calib has none")
        if self.dropped_objects:
            print_log(f'KittiDataset: dropped objects not in classes {self.classes}: {dict(self.dropped_objects)}',
                      logger='current')
        return frames

    def _frame_ids(self):
        if self.ann_file and osp.isfile(self.ann_file):
            with open(self.ann_file) as f:
                return [line.strip() for line in f if line.strip()]
        if self.ann_file:
            raise FileNotFoundError(f'KittiDataset: ann_file {self.ann_file!r} does not exist')
        folder = self.data_prefix['pts']
        if not osp.isdir(folder):
            raise FileNotFoundError(f'KittiDataset: point folder {folder!r} does not exist (data_root='
                                    f'{self.data_root!r}, data_prefix["pts"])')
        return sorted(osp.splitext(n)[0] for n in os.listdir(folder) if n.endswith('.bin'))

    def _layout_frame(self, frame_id):
        label_path = osp.join(self.data_prefix['label'], f'{frame_id}.txt')
        calib_path = osp.join(self.data_prefix['calib'], f'{frame_id}.txt')
        if osp.isfile(label_path):
            objects = read_label(label_path)
        elif self.test_mode:
            objects = []
        else:
            raise FileNotFoundError(f'KittiDataset: label file {label_path!r} does not exist (set test_mode=True '
                                    'to read unlabelled frames)')
        calib = read_calib(calib_path)
        frame = dict(frame_id=frame_id, lidar_path=osp.join(self.data_prefix['pts'], f'{frame_id}.bin'),
                     lidar2cam=lidar2cam_from_calib(calib), objects=objects)
        if 'P2' in calib:
            frame['lidar2img'] = lidar2img_from_calib(calib)
        return frame

    def _annotations(self, frame):
        objects = frame.pop('objects')
        kept = [o for o in objects if o['name'] in self.classes]
        self.dropped_objects.update(o['name'] for o in objects if o['name'] not in self.classes)
        cam = torch.tensor(np.array([o['box_camera'] for o in kept], dtype=np.float64).reshape(-1, 7))
        boxes = camera_to_lidar_boxes(cam, frame['lidar2cam']).float()
        labels = torch.tensor([self.classes.index(o['name']) for o in kept], dtype=torch.long)
        return boxes, labels, len(objects) - len(kept)

    # ---------------------------------------------------------------------------------- samples
    def load_sample(self, info):
        """Load the frame's points (non-finite rows dropped and reported) and derive the per-point masks.

        Returns:
            dict: ``points`` (N, C) float32, ``pts_semantic_mask`` (N,) int64 (``len(classes)`` = background),
            ``pts_instance_mask`` (N,) int64 (-1 = no box), ``num_points_in_gt`` (M,), ``num_points_invalid`` and
            ``num_points_out_of_view`` (int).
        """
        points, invalid = drop_non_finite(load_points(info['lidar_path'], self.load_dim, self.use_dim))
        report_dropped(self, 'num_points_invalid', invalid, lambda: f'dropped {invalid} of {len(points) + invalid} '
                       f"points with NaN/Inf values in {info['lidar_path']!r} (frame {info.get('frame_id')})")
        out_of_view = 0
        if self.camera_fov:
            in_view = torch.from_numpy(camera_fov_mask(points, info['lidar2img'], info['image_size']))
            out_of_view = int((~in_view).sum())
            points = points[in_view]
            report_dropped(self, 'num_points_out_of_view', out_of_view, lambda: f'kept the {len(points)} of '
                           f'{len(points) + out_of_view} points in the camera view of frame {info.get("frame_id")} '
                           '(camera_fov=True)')
        boxes = info['gt_bboxes_3d']
        instance = points_in_boxes(points, boxes)
        labels = info['gt_labels_3d']
        background = torch.full_like(instance, len(self.classes))
        semantic = torch.where(instance >= 0, labels[instance.clamp(min=0)] if len(labels) else background,
                               background)
        return dict(points=points, pts_semantic_mask=semantic, pts_instance_mask=instance,
                    num_points_in_gt=points_in_boxes_all(points, boxes).sum(dim=0), num_points_invalid=invalid,
                    num_points_out_of_view=out_of_view)
