"""7-dof lidar boxes as plain tensors.

Convention (mmdet3d ``LiDARInstance3DBoxes`` with origin (0.5, 0.5, 0)):
``[x, y, z, l, w, h, yaw]`` where (x, y, z) is the **bottom-face centre**, ``l`` is the
extent along the heading, ``w`` across it, ``h`` vertical, and ``yaw`` is the rotation
about +z from the +x axis (counter-clockwise, radians).  Functions accept (..., 7) tensors
and never modify their inputs.

Camera boxes (KITTI ``label_2`` / mmdet3d ``CameraInstance3DBoxes``) are
``[x, y, z, l, h, w, ry]`` in the rectified camera frame (x right, y down, z forward) with
(x, y, z) the bottom-face centre; ``lidar2cam`` is the 4x4 rigid transform
``R0_rect @ Tr_velo_to_cam`` taking lidar coordinates to rectified camera coordinates.
"""
import math

import numpy as np
import torch

from fsdlite.ops import boxes_iou_bev

BOX_DIM = 7
FLIP_DIRECTIONS = ('horizontal', 'vertical')


def limit_period(angle, offset=0.5, period=2 * math.pi):
    """Wrap ``angle`` into ``[-offset * period, (1 - offset) * period)``."""
    return angle - torch.floor(angle / period + offset) * period


def bottom_to_gravity(boxes):
    """(..., 7) boxes with bottom-centre z -> gravity-centre z."""
    out = boxes.clone()
    out[..., 2] = boxes[..., 2] + boxes[..., 5] * 0.5
    return out


def gravity_to_bottom(boxes):
    """(..., 7) boxes with gravity-centre z -> bottom-centre z."""
    out = boxes.clone()
    out[..., 2] = boxes[..., 2] - boxes[..., 5] * 0.5
    return out


# ------------------------------------------------------------------------------ geometry
def rotation_z(angle, dtype=torch.float32, device=None):
    """(3, 3) matrix rotating column vectors counter-clockwise by ``angle`` (radians) about +z."""
    angle = torch.as_tensor(angle, dtype=torch.float64)
    c, s = torch.cos(angle).item(), torch.sin(angle).item()
    return torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=dtype, device=device)


def bev_corners(boxes):
    """Footprint corners of (M, 7) boxes: (M, 4, 2) xy, counter-clockwise.

    Corner order in the box frame: (+l/2, +w/2), (-l/2, +w/2), (-l/2, -w/2), (+l/2, -w/2), then
    rotated by yaw and shifted to the centre.
    """
    signs = boxes.new_tensor([[1, 1], [-1, 1], [-1, -1], [1, -1]]) * 0.5
    local = signs[None] * boxes[:, None, 3:5]
    c, s = torch.cos(boxes[:, 6])[:, None], torch.sin(boxes[:, 6])[:, None]
    x = local[..., 0] * c - local[..., 1] * s + boxes[:, None, 0]
    y = local[..., 0] * s + local[..., 1] * c + boxes[:, None, 1]
    return torch.stack([x, y], dim=-1)


def box_corners(boxes):
    """Corners of (M, 7) bottom-origin boxes: (M, 8, 3); 0-3 bottom face, 4-7 top face (same xy order
    as :func:`bev_corners`)."""
    xy = bev_corners(boxes).repeat(1, 2, 1)
    z = torch.cat([boxes[:, None, 2].expand(-1, 4), (boxes[:, 2] + boxes[:, 5])[:, None].expand(-1, 4)], dim=1)
    return torch.cat([xy, z[..., None]], dim=-1)


# ------------------------------------------------------------------------------ augmentation
def rotate_points(points, angle):
    """Rotate the xyz of (N, C) points by ``angle`` about +z (other columns kept)."""
    out = points.clone()
    out[:, :3] = points[:, :3] @ rotation_z(angle, points.dtype, points.device).T
    return out


def rotate_boxes(boxes, angle):
    """Rotate (M, 7) boxes by ``angle`` about +z: centres rotate, yaw grows by ``angle`` (wrapped to [-pi, pi))."""
    out = rotate_points(boxes, angle)
    out[:, 6] = limit_period(boxes[:, 6] + angle)
    return out


def _check_direction(direction):
    if direction not in FLIP_DIRECTIONS:
        raise ValueError(f'direction must be one of {list(FLIP_DIRECTIONS)}, got {direction!r}')


def flip_points(points, direction='horizontal'):
    """Mirror (N, C) points in BEV: 'horizontal' negates y (left-right), 'vertical' negates x."""
    _check_direction(direction)
    out = points.clone()
    axis = 1 if direction == 'horizontal' else 0
    out[:, axis] = -points[:, axis]
    return out


def flip_boxes(boxes, direction='horizontal'):
    """Mirror (M, 7) boxes like :func:`flip_points`: yaw -> -yaw ('horizontal') or pi - yaw ('vertical')."""
    out = flip_points(boxes, direction)
    yaw = -boxes[:, 6] if direction == 'horizontal' else math.pi - boxes[:, 6]
    out[:, 6] = limit_period(yaw)
    return out


def scale_points(points, factor):
    """Scale the xyz of (N, C) points by ``factor`` about the origin."""
    out = points.clone()
    out[:, :3] = points[:, :3] * factor
    return out


def scale_boxes(boxes, factor):
    """Scale (M, 7) boxes about the origin: centre and sizes times ``factor``, yaw unchanged."""
    out = boxes.clone()
    out[:, :6] = boxes[:, :6] * factor
    return out


def translate_points(points, offset):
    """Shift the xyz of (N, C) points (or (M, 7) box centres) by ``offset`` (3,)."""
    out = points.clone()
    out[:, :3] = points[:, :3] + torch.as_tensor(offset, dtype=points.dtype, device=points.device)
    return out


translate_boxes = translate_points


# ------------------------------------------------------------------------------ camera <-> lidar
def _transform(matrix, xyz):
    m = torch.as_tensor(matrix, dtype=torch.float64, device=xyz.device)
    if m.shape != (4, 4):
        raise ValueError(f'expected a 4x4 transform, got shape {tuple(m.shape)}')
    return xyz.to(torch.float64) @ m[:3, :3].T + m[:3, 3]


def camera_to_lidar_boxes(boxes_cam, lidar2cam):
    """KITTI camera boxes (M, 7) ``[x, y, z, l, h, w, ry]`` -> lidar boxes (M, 7) ``[x, y, z, l, w, h, yaw]``.

    Centre: ``inv(lidar2cam) @ [x, y, z, 1]`` (bottom centre stays bottom centre); sizes
    ``(l, h, w) -> (l, w, h)``; ``yaw = -ry - pi/2`` wrapped to [-pi, pi).  Computed in float64,
    returned in the input dtype.

    Args:
        boxes_cam (Tensor): (M, 7) camera boxes.
        lidar2cam (Tensor | array): (4, 4) ``R0_rect @ Tr_velo_to_cam``.
    """
    b = boxes_cam.to(torch.float64)
    cam2lidar = torch.linalg.inv(torch.as_tensor(lidar2cam, dtype=torch.float64, device=b.device))
    centre = _transform(cam2lidar, b[:, :3])
    yaw = limit_period(-b[:, 6] - math.pi / 2)
    out = torch.cat([centre, b[:, 3:4], b[:, 5:6], b[:, 4:5], yaw[:, None]], dim=1)
    return out.to(boxes_cam.dtype)


def lidar_to_camera_boxes(boxes, lidar2cam):
    """Inverse of :func:`camera_to_lidar_boxes`: lidar (M, 7) -> camera (M, 7) ``[x, y, z, l, h, w, ry]``."""
    b = boxes.to(torch.float64)
    centre = _transform(lidar2cam, b[:, :3])
    ry = limit_period(-b[:, 6] - math.pi / 2)
    out = torch.cat([centre, b[:, 3:4], b[:, 5:6], b[:, 4:5], ry[:, None]], dim=1)
    return out.to(boxes.dtype)


# ------------------------------------------------------------------------------ collisions
def bev_circle_overlap(a, b, margin=0.0):
    """Conservative BEV collision test: (N, M) bool, True where the circumscribed circles of the
    footprints of ``a`` (N, 7) and ``b`` (M, 7), each footprint grown by ``margin`` in l and w, intersect.
    Never misses a pair that :func:`bev_overlap` reports.  Accepts torch tensors or numpy arrays
    (computed in float64, returned as the same kind)."""
    if isinstance(a, torch.Tensor):
        a, b = a.double(), b.double()
    else:
        a, b = np.asarray(a, dtype=np.float64).reshape(-1, 7), np.asarray(b, dtype=np.float64).reshape(-1, 7)
    ra = ((a[:, 3] + margin) ** 2 + (a[:, 4] + margin) ** 2) ** 0.5 * 0.5
    rb = ((b[:, 3] + margin) ** 2 + (b[:, 4] + margin) ** 2) ** 0.5 * 0.5
    dx = a[:, None, 0] - b[None, :, 0]
    dy = a[:, None, 1] - b[None, :, 1]
    return dx * dx + dy * dy < (ra[:, None] + rb[None, :]) ** 2


def bev_overlap(a, b, margin=0.0):
    """BEV collision test between (N, 7) and (M, 7) boxes: (N, M) bool.

    True where the footprints, each grown by ``margin`` in l and w (so a gap of at least ``margin``
    separates non-colliding boxes), overlap with positive area: the rotated-rectangle IoU of
    ``fsdlite.ops.boxes_iou_bev`` on the pairs the conservative :func:`bev_circle_overlap` lets through.
    """
    near = bev_circle_overlap(a, b, margin)
    if not bool(near.any()):
        return near
    grown_a, grown_b = a.clone(), b.clone()
    grown_a[:, 3:5] += margin
    grown_b[:, 3:5] += margin
    return (boxes_iou_bev(grown_a.double(), grown_b.double()) > 0) & near
