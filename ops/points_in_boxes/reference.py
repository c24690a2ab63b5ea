"""Pure-torch reference of points_in_boxes (same double-precision geometry as the kernels)."""
import torch


def box_params(boxes, box_origin='bottom'):
    """(M, 7) boxes -> (M, 8) float64 ``[cx, cy, z_low, z_high, l/2, w/2, cos(yaw), sin(yaw)]``."""
    b = boxes.to(torch.float64)
    z, h = b[:, 2], b[:, 5]
    if box_origin == 'bottom':
        z_low, z_high = z, z + h
    else:
        z_low, z_high = z - h * 0.5, z + h * 0.5
    return torch.stack([b[:, 0], b[:, 1], z_low, z_high, b[:, 3] * 0.5, b[:, 4] * 0.5,
                        torch.cos(b[:, 6]), torch.sin(b[:, 6])], dim=1)


def points_in_boxes_all_reference(points, boxes, point_batch=None, box_batch=None, box_origin='bottom'):
    """(N, M) bool: point i lies in box j (xy strictly, z inclusively) and both belong to one sample.

    Materialises (N, M) float64 intermediates: meant for tests and benchmarks, not large inputs.
    """
    p = box_params(boxes, box_origin)
    pts = points[:, :3].to(torch.float64)
    dx = pts[:, None, 0] - p[None, :, 0]
    dy = pts[:, None, 1] - p[None, :, 1]
    local_x = dx * p[None, :, 6] + dy * p[None, :, 7]
    local_y = dy * p[None, :, 6] - dx * p[None, :, 7]
    pz = pts[:, None, 2]
    inside = ((pz >= p[None, :, 2]) & (pz <= p[None, :, 3])
              & (local_x > -p[None, :, 4]) & (local_x < p[None, :, 4])
              & (local_y > -p[None, :, 5]) & (local_y < p[None, :, 5]))
    if point_batch is not None:
        inside &= point_batch[:, None] == box_batch[None, :]
    return inside


def points_in_boxes_reference(points, boxes, point_batch=None, box_batch=None, box_origin='bottom'):
    """(N,) int64: index of the first (lowest-index) box of the point's sample containing it, else -1."""
    inside = points_in_boxes_all_reference(points, boxes, point_batch, box_batch, box_origin)
    if inside.shape[1] == 0:
        return torch.full((inside.shape[0],), -1, dtype=torch.long, device=points.device)
    first = inside.to(torch.uint8).argmax(dim=1)
    return torch.where(inside.any(dim=1), first, torch.full_like(first, -1))
