"""7-dof lidar boxes as plain tensors.

Convention (mmdet3d ``LiDARInstance3DBoxes`` with origin (0.5, 0.5, 0)):
``[x, y, z, l, w, h, yaw]`` where (x, y, z) is the **bottom-face centre**, ``l`` is the
extent along the heading, ``w`` across it, ``h`` vertical, and ``yaw`` is the rotation
about +z from the +x axis (counter-clockwise, radians).  Functions accept (..., 7) tensors.
"""
import math

import torch

BOX_DIM = 7


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
