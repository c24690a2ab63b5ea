"""3D IoU of lidar boxes derived from their rotated BEV IoU.

Boxes are ``[x, y, z_bottom, l, w, h, yaw]``.  The BEV intersection area follows from the BEV IoU
``u`` and the footprints ``A``, ``B``: ``I = u (A + B) / (1 + u)``; the 3D intersection is
``I`` times the overlap of the vertical extents ``[z, z + h]``.
"""
import torch


def boxes_iou_3d_from_bev(boxes_a, boxes_b, iou_bev):
    """3D IoU (N, M) of boxes_a (N, 7) and boxes_b (M, 7) given their BEV IoU (N, M).

    Degenerate boxes (zero volume) have IoU 0 with everything (never NaN).
    """
    if boxes_a.shape[-1] != 7 or boxes_b.shape[-1] != 7 or iou_bev.shape != (boxes_a.shape[0], boxes_b.shape[0]):
        raise ValueError(f'boxes_iou_3d_from_bev: expected boxes (N, 7), (M, 7) and iou_bev (N, M), got '
                         f'{tuple(boxes_a.shape)}, {tuple(boxes_b.shape)}, {tuple(iou_bev.shape)}')
    area_a = (boxes_a[:, 3] * boxes_a[:, 4])[:, None]
    area_b = (boxes_b[:, 3] * boxes_b[:, 4])[None, :]
    inter_bev = iou_bev * (area_a + area_b) / (1.0 + iou_bev)
    top = torch.minimum((boxes_a[:, 2] + boxes_a[:, 5])[:, None], (boxes_b[:, 2] + boxes_b[:, 5])[None, :])
    bottom = torch.maximum(boxes_a[:, 2][:, None], boxes_b[:, 2][None, :])
    inter = inter_bev * (top - bottom).clamp(min=0)
    union = (area_a * boxes_a[:, 5][:, None]) + (area_b * boxes_b[:, 5][None, :]) - inter
    positive = union > 0
    return torch.where(positive, inter / torch.where(positive, union, torch.ones_like(union)), torch.zeros_like(union))
