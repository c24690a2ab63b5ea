"""KITTI object-format files: ``label_2`` lines, ``calib`` files and mmdet3d v2 info ``.pkl`` entries.

Label line: ``type truncated occluded alpha x1 y1 x2 y2 h w l x y z ry [score]`` (camera frame, metres,
(x, y, z) the bottom-face centre).  Calib file: ``P0..P3`` (3x4), ``R0_rect`` (3x3), ``Tr_velo_to_cam``
and ``Tr_imu_to_velo`` (3x4), one ``key: values`` line each.  Camera boxes are returned as
``[x, y, z, l, h, w, ry]`` (mmdet3d's order), the order :func:`fsdlite.structures.boxes.camera_to_lidar_boxes`
expects.
"""
import math
import os
import pickle

import numpy as np
import torch

from ..structures.boxes import lidar_to_camera_boxes
from ..structures.camera import KITTI_IMAGE_SIZE, image_boxes

# mmdet3d v2 KITTI info label ids (``bbox_label_3d``); -1 is DontCare.
KITTI_CATEGORIES = ('Pedestrian', 'Cyclist', 'Car', 'Van', 'Truck', 'Person_sitting', 'Tram', 'Misc')
CALIB_KEYS = ('P0', 'P1', 'P2', 'P3', 'R0_rect', 'Tr_velo_to_cam', 'Tr_imu_to_velo')


def _homogeneous(values, rows, cols):
    m = np.eye(4)
    m[:rows, :cols] = np.asarray(values, dtype=np.float64).reshape(rows, cols)
    return m


def read_calib(path):
    """Parse a KITTI calib file into 4x4 float64 matrices keyed like :data:`CALIB_KEYS`."""
    shapes = dict(P0=(3, 4), P1=(3, 4), P2=(3, 4), P3=(3, 4), R0_rect=(3, 3), Tr_velo_to_cam=(3, 4),
                  Tr_imu_to_velo=(3, 4))
    calib = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            key, _, values = line.partition(':')
            key = key.strip()
            if key not in shapes:
                continue
            rows, cols = shapes[key]
            try:
                numbers = [float(v) for v in values.split()]
                calib[key] = _homogeneous(numbers, rows, cols)
            except ValueError:
                raise ValueError(f'{path}:{number}: {key} needs {rows * cols} numbers, got {values.strip()!r}') \
                    from None
    missing = [k for k in ('R0_rect', 'Tr_velo_to_cam') if k not in calib]
    if missing:
        raise ValueError(f'calib file {str(path)!r} lacks {missing}')
    return calib


def lidar2cam_from_calib(calib):
    """``R0_rect @ Tr_velo_to_cam`` (4x4): lidar -> rectified camera coordinates."""
    return calib['R0_rect'] @ calib['Tr_velo_to_cam']


def format_calib(calib):
    """Inverse of :func:`read_calib`: calib text from 4x4 matrices (full float precision)."""
    lines = []
    for key in CALIB_KEYS:
        if key in calib:
            m = np.asarray(calib[key], dtype=np.float64)
            block = m[:3, :3] if key == 'R0_rect' else m[:3, :4]
            lines.append(f'{key}: ' + ' '.join(repr(float(v)) for v in block.reshape(-1)))
    return '\n'.join(lines) + '\n'


def read_label(path):
    """Parse a ``label_2`` file.

    Returns:
        list[dict]: per object ``name``, ``truncated``, ``occluded``, ``alpha``, ``bbox`` (4,), ``box_camera``
        (7,) ``[x, y, z, l, h, w, ry]`` and ``score`` (1.0 when absent).
    """
    objects = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) not in (15, 16):
                raise ValueError(f'{path}:{number}: a KITTI label line has 15 or 16 fields, got {len(fields)}')
            try:
                v = [float(x) for x in fields[1:]]
            except ValueError:
                raise ValueError(f'{path}:{number}: non-numeric label fields in {line.strip()!r}') from None
            h, w, l, x, y, z, ry = v[7:14]
            objects.append(dict(name=fields[0], truncated=v[0], occluded=int(v[1]), alpha=v[2], bbox=v[3:7],
                                box_camera=[x, y, z, l, h, w, ry], score=v[14] if len(v) > 14 else 1.0))
    return objects


def format_label(objects):
    """Inverse of :func:`read_label`: label text (full float precision) from object dicts."""
    lines = []
    for o in objects:
        x, y, z, l, h, w, ry = (float(v) for v in o['box_camera'])
        values = [o.get('truncated', 0.0), int(o.get('occluded', 0)), o.get('alpha', -10.0),
                  *o.get('bbox', (0.0, 0.0, 0.0, 0.0)), h, w, l, x, y, z, ry]
        lines.append(' '.join([o['name']] + [repr(float(v)) if not isinstance(v, int) else str(v) for v in values]))
    return '\n'.join(lines) + ('\n' if lines else '')


def result_lines(names, boxes, scores, lidar2cam, lidar2img, image_size=KITTI_IMAGE_SIZE):
    """KITTI result lines (the label line plus a score) of lidar detections, as KITTI's evaluation reads them.

    ``type -1 -1 alpha x1 y1 x2 y2 h w l x y z ry score``: truncation and occlusion unknown (-1); the 2D box is the
    3D box's eight corners projected through ``lidar2img`` and clipped to the image; the camera box comes from
    ``lidar2cam``; ``alpha = ry - atan2(x, z)``. Detections whose 2D box has no area (outside the image) are left
    out: the scoring could only ignore them.

    Args:
        names (sequence[str]): (M,) KITTI type names; boxes (Tensor | array): (M, 7) bottom-centre lidar boxes;
        scores (sequence): (M,); lidar2cam, lidar2img (array): (4, 4); image_size: (width, height).
    Returns:
        tuple: ``lines`` (list[str]) and ``kept`` (M,) bool (which detections have a line).
    """
    boxes = torch.as_tensor(np.asarray(boxes, dtype=np.float64) if not isinstance(boxes, torch.Tensor)
                            else boxes.detach().cpu().double()).reshape(-1, 7)
    scores = np.asarray(torch.as_tensor(scores).detach().cpu(), dtype=np.float64).reshape(-1)
    if not len(names) == len(boxes) == len(scores):
        raise ValueError(f'result_lines: names, boxes and scores must have one row per detection, got '
                         f'{len(names)}, {len(boxes)}, {len(scores)}')
    bbox, _ = image_boxes(boxes, lidar2img, image_size)
    kept = (bbox[:, 2] > bbox[:, 0]) & (bbox[:, 3] > bbox[:, 1])
    cam = lidar_to_camera_boxes(boxes, torch.as_tensor(np.asarray(lidar2cam, dtype=np.float64))).numpy()
    lines = []
    for i in np.flatnonzero(kept):
        x, y, z, l, h, w, ry = (float(v) for v in cam[i])
        alpha = ry - math.atan2(x, z)
        x1, y1, x2, y2 = (float(v) for v in bbox[i])
        lines.append(f'{names[i]} -1 -1 {alpha:.4f} {x1:.2f} {y1:.2f} {x2:.2f} {y2:.2f} {h:.4f} {w:.4f} {l:.4f} '
                     f'{x:.4f} {y:.4f} {z:.4f} {ry:.4f} {scores[i]:.6f}')
    return lines, kept


def read_info_pkl(path):
    """Read an mmdet3d v2 KITTI info ``.pkl`` into frame dicts.

    Returns:
        list[dict]: per frame ``frame_id`` (str), ``lidar_file`` (relative path), ``lidar2cam`` (4x4),
        ``lidar2img`` (4x4, CAM2) and ``image_size`` ((width, height)) when the info has them, ``num_pts_feats``
        and ``objects`` (dicts with ``name``, ``box_camera``, ``bbox``, ``truncated``, ``occluded``).
    """
    with open(path, 'rb') as f:
        data = pickle.load(f)
    if not isinstance(data, dict) or 'data_list' not in data:
        raise ValueError(f'{str(path)!r} is not an mmdet3d v2 info file (expected a dict with "data_list")')
    categories = data.get('metainfo', {}).get('categories')
    id_to_name = {v: k for k, v in categories.items()} if categories else dict(enumerate(KITTI_CATEGORIES))
    frames = []
    for entry in data['data_list']:
        lidar = entry['lidar_points']
        lidar2cam = np.asarray(entry['images']['R0_rect'], dtype=np.float64) @ np.asarray(lidar['Tr_velo_to_cam'],
                                                                                          dtype=np.float64)
        objects = [dict(name=id_to_name.get(ins['bbox_label_3d'], 'DontCare'), box_camera=list(ins['bbox_3d']),
                        bbox=list(ins.get('bbox', (0.0, 0.0, 0.0, 0.0))), truncated=float(ins.get('truncated', 0.0)),
                        occluded=int(ins.get('occluded', 0))) for ins in entry.get('instances', [])]
        sample_id = entry.get('sample_idx', entry.get('sample_id'))
        frame_id = f'{int(sample_id):06d}' if sample_id is not None else os.path.splitext(
            os.path.basename(lidar['lidar_path']))[0]
        frame = dict(frame_id=frame_id, lidar_file=lidar['lidar_path'], lidar2cam=lidar2cam,
                     num_pts_feats=int(lidar.get('num_pts_feats', 4)), objects=objects)
        cam2 = entry['images'].get('CAM2', {})
        if 'lidar2img' in cam2:
            frame['lidar2img'] = np.asarray(cam2['lidar2img'], dtype=np.float64)
        if 'width' in cam2 and 'height' in cam2:
            frame['image_size'] = (int(cam2['width']), int(cam2['height']))
        frames.append(frame)
    return frames
