"""The camera side of KITTI-style lidar data: projection, field-of-view cropping and 2D boxes.

``lidar2img`` is the 4x4 matrix ``P2 @ R0_rect @ Tr_velo_to_cam`` (KITTI's left colour camera) taking
homogeneous lidar coordinates to homogeneous pixel coordinates; a point is *in the camera's field of view*
when its depth is positive and its pixel lies inside the image (mmdet3d's ``velodyne_reduced``).
KITTI images are about 1242 x 375 pixels (a few drives differ by a few pixels).

:data:`KITTI_NOMINAL_CALIB` is the calibration of KITTI's 2011_09_26 drives (25 of the 30 frames in
``kitti_tiny_3d``); the simulator uses it so that synthetic frames are cropped and labelled like real ones.
"""
import numpy as np
import torch

from .boxes import box_corners

KITTI_IMAGE_SIZE = (1242, 375)  # (width, height) in pixels

KITTI_NOMINAL_CALIB = dict(
    P2=np.array([[721.5377, 0.0, 609.5593, 44.85728], [0.0, 721.5377, 172.854, 0.2163791],
                 [0.0, 0.0, 1.0, 0.002745884], [0.0, 0.0, 0.0, 1.0]]),
    R0_rect=np.array([[0.9999239, 0.00983776, -0.007445048, 0.0], [-0.009869795, 0.9999421, -0.004278459, 0.0],
                      [0.007402527, 0.004351614, 0.9999631, 0.0], [0.0, 0.0, 0.0, 1.0]]),
    Tr_velo_to_cam=np.array([[0.007533745, -0.9999714, -0.000616602, -0.004069766],
                             [0.01480249, 0.0007280733, -0.9998902, -0.07631618],
                             [0.9998621, 0.00752379, 0.01480755, -0.2717806], [0.0, 0.0, 0.0, 1.0]]))


def lidar2img_from_calib(calib):
    """(4, 4) float64 ``P2 @ R0_rect @ Tr_velo_to_cam`` from a calib dict of 4x4 matrices."""
    missing = [k for k in ('P2', 'R0_rect', 'Tr_velo_to_cam') if k not in calib]
    if missing:
        raise KeyError(f'lidar2img_from_calib: the calib lacks {missing}; it has {sorted(calib)}')
    return np.asarray(calib['P2'], np.float64) @ np.asarray(calib['R0_rect'], np.float64) @ \
        np.asarray(calib['Tr_velo_to_cam'], np.float64)


def _check_matrix(lidar2img):
    matrix = np.asarray(lidar2img, dtype=np.float64)
    if matrix.shape != (4, 4) or not np.isfinite(matrix).all():
        raise ValueError(f'lidar2img must be a finite 4x4 matrix, got shape {matrix.shape}')
    return matrix


def project_points(xyz, lidar2img):
    """Pixel coordinates and depth of lidar points.

    Args:
        xyz (array | Tensor): (N, 3) lidar-frame points.
        lidar2img (array): (4, 4) lidar -> homogeneous pixel matrix.
    Returns:
        tuple of ndarrays: ``u`` (N,), ``v`` (N,) pixel coordinates (NaN-free only where ``depth > 0``)
        and ``depth`` (N,) along the camera axis (m).
    """
    xyz = np.asarray(xyz.detach().cpu() if isinstance(xyz, torch.Tensor) else xyz, dtype=np.float64)
    if xyz.ndim != 2 or xyz.shape[1] < 3:
        raise ValueError(f'project_points: xyz must be (N, >=3), got shape {xyz.shape}')
    matrix = _check_matrix(lidar2img)
    homo = xyz[:, :3] @ matrix[:3, :3].T + matrix[:3, 3]
    depth = homo[:, 2]
    with np.errstate(divide='ignore', invalid='ignore'):
        u, v = homo[:, 0] / depth, homo[:, 1] / depth
    return u, v, depth


def camera_fov_mask(xyz, lidar2img, image_size=KITTI_IMAGE_SIZE):
    """(N,) bool: the points with positive depth whose projection falls inside the image.

    Args:
        xyz (array | Tensor): (N, >=3) lidar-frame points.
        lidar2img (array): (4, 4) matrix (:func:`lidar2img_from_calib`).
        image_size (tuple): (width, height) in pixels; a pixel (u, v) is inside when 0 <= u < width and
            0 <= v < height.
    """
    width, height = (float(s) for s in image_size)
    if not (width > 0 and height > 0):
        raise ValueError(f'camera_fov_mask: image_size must be two positive numbers, got {image_size!r}')
    u, v, depth = project_points(xyz, lidar2img)
    with np.errstate(invalid='ignore'):
        return (depth > 0) & (u >= 0) & (u < width) & (v >= 0) & (v < height)


def image_boxes(boxes, lidar2img, image_size=KITTI_IMAGE_SIZE):
    """2D image boxes of 3D lidar boxes, as KITTI result lines carry them.

    The box is the bounding rectangle of the projected eight corners, clipped to the image. Corners behind
    the camera (depth <= 0.1 m) are moved onto the depth-0.1 plane along their edges first, so a box that
    reaches behind the camera still gets a finite rectangle.

    Args:
        boxes (Tensor | array): (M, 7) bottom-centre lidar boxes.
        lidar2img (array): (4, 4) matrix.
        image_size (tuple): (width, height).
    Returns:
        tuple of ndarrays: ``bbox`` (M, 4) float64 ``[x1, y1, x2, y2]`` clipped to the image (zero-size
        when the box is entirely outside) and ``truncation`` (M,) in [0, 1]: the share of the unclipped
        rectangle's area that lies outside the image (1 for a box entirely outside or behind the camera).
    """
    boxes = torch.as_tensor(np.asarray(boxes, dtype=np.float64) if not isinstance(boxes, torch.Tensor)
                            else boxes.detach().cpu().double()).reshape(-1, 7)
    width, height = (float(s) for s in image_size)
    if len(boxes) == 0:
        return np.zeros((0, 4)), np.zeros(0)
    corners = box_corners(boxes).numpy()  # (M, 8, 3)
    matrix = _check_matrix(lidar2img)
    cam = corners @ matrix[:3, :3].T + matrix[:3, 3]  # homogeneous pixels, depth in [..., 2]
    cam = _clip_behind(cam, corners.shape[0])
    depth = cam[..., 2]
    valid = depth > 0.05
    with np.errstate(divide='ignore', invalid='ignore'):
        u = np.where(valid, cam[..., 0] / depth, np.nan)
        v = np.where(valid, cam[..., 1] / depth, np.nan)
    any_valid = valid.any(axis=1)
    x1, x2 = np.nanmin(np.where(any_valid[:, None], u, 0), 1), np.nanmax(np.where(any_valid[:, None], u, 0), 1)
    y1, y2 = np.nanmin(np.where(any_valid[:, None], v, 0), 1), np.nanmax(np.where(any_valid[:, None], v, 0), 1)
    full = np.stack([x1, y1, x2, y2], axis=1)
    clipped = np.stack([np.clip(x1, 0, width), np.clip(y1, 0, height), np.clip(x2, 0, width),
                        np.clip(y2, 0, height)], axis=1)
    area = (full[:, 2] - full[:, 0]) * (full[:, 3] - full[:, 1])
    inside = (clipped[:, 2] - clipped[:, 0]) * (clipped[:, 3] - clipped[:, 1])
    truncation = np.where((area > 0) & any_valid, 1.0 - inside / np.where(area > 0, area, 1.0), 1.0)
    clipped[~any_valid] = 0.0
    return clipped, np.clip(truncation, 0.0, 1.0)


_EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4], [0, 4], [1, 5], [2, 6], [3, 7]])


def _clip_behind(cam, num_boxes, near=0.1):
    """Corners (M, 8, 3) in homogeneous pixels, plus the points where box edges cross depth ``near``
    (M, 12, 3); corners behind ``near`` are dropped later by the depth test."""
    a, b = cam[:, _EDGES[:, 0]], cam[:, _EDGES[:, 1]]
    da, db = a[..., 2] - near, b[..., 2] - near
    crosses = (da * db) < 0
    with np.errstate(divide='ignore', invalid='ignore'):
        s = np.where(crosses, da / (da - db), 0.0)
    cut = a + s[..., None] * (b - a)
    cut[~crosses] = np.nan  # not a crossing: ignored by the nan-aware min/max
    cut[..., 2] = np.where(crosses, near, -1.0)
    return np.concatenate([cam, cut], axis=1)


__all__ = ['KITTI_IMAGE_SIZE', 'KITTI_NOMINAL_CALIB', 'lidar2img_from_calib', 'project_points', 'camera_fov_mask',
           'image_boxes']
