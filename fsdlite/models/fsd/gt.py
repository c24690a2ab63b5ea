"""Ground truth of a batch as flat tensors with sample ids, and box-membership targets.

The data samples (one per frame) are flattened once at the model boundary into
:class:`GtBatch`; everything downstream is tensor code over sample ids.
"""
from typing import NamedTuple

import torch

from fsdlite.ops import points_in_boxes

from ...structures import bottom_to_gravity


class GtBatch(NamedTuple):
    """Ground-truth boxes of a batch: ``boxes`` (M, 7) bottom-centre, ``labels`` (M,), ``batch`` (M,) sample ids."""

    boxes: torch.Tensor
    labels: torch.Tensor
    batch: torch.Tensor


def collect_gt(data_samples, device, num_classes):
    """Concatenate ``gt_instances_3d`` of all data samples into a :class:`GtBatch` on ``device``.

    Raises ``ValueError`` for boxes that are not (M, 7), labels outside [0, num_classes) or
    non-positive box dimensions (they would poison the log-size targets).
    """
    boxes, labels, batch = [], [], []
    for i, sample in enumerate(data_samples):
        gt = sample.gt_instances_3d
        b = torch.as_tensor(gt.bboxes_3d, dtype=torch.float32, device=device)
        lab = torch.as_tensor(gt.labels_3d, dtype=torch.int64, device=device)
        if b.dim() != 2 or b.shape[1] != 7 or lab.shape != (b.shape[0],):
            raise ValueError(f'sample {i}: gt_instances_3d.bboxes_3d must be (M, 7) and labels_3d (M,), '
                             f'got {tuple(b.shape)} and {tuple(lab.shape)}')
        if lab.numel() and (int(lab.min()) < 0 or int(lab.max()) >= num_classes):
            raise ValueError(f'sample {i}: gt labels_3d must lie in [0, {num_classes}), got {lab.unique().tolist()}')
        if b.numel() and not bool((b[:, 3:6] > 0).all()):
            raise ValueError(f'sample {i}: gt box dimensions must be > 0, got min {float(b[:, 3:6].min())}')
        boxes.append(b)
        labels.append(lab)
        batch.append(torch.full_like(lab, i))
    if not boxes:
        empty = torch.zeros(0, dtype=torch.int64, device=device)
        return GtBatch(torch.zeros(0, 7, device=device), empty, empty.clone())
    return GtBatch(torch.cat(boxes), torch.cat(labels), torch.cat(batch))


def enlarge_boxes(boxes, margin_xy=0.0, margin_z=0.0):
    """Grow boxes (M, 7) by ``margin_xy`` on each side in l and w and ``margin_z`` below and above."""
    out = boxes.clone()
    out[:, 3:5] += 2 * margin_xy
    out[:, 5] += 2 * margin_z
    out[:, 2] -= margin_z
    return out


def assign_to_boxes(xyz, batch, gt, keys=None, gt_keys=None, num_keys=None, margin_xy=0.0, margin_z=0.0):
    """Index (N,) of the (enlarged) ground-truth box containing each point of its sample, -1 if none.

    Args:
        xyz (Tensor): (N, 3) points.
        batch (Tensor): (N,) sample ids.
        gt (GtBatch): the batch's ground truth.
        keys, gt_keys (Tensor, optional): (N,) / (M,) extra ids in [0, num_keys) a point and a box must
            share (e.g. the class): membership is tested within ``batch * num_keys + key`` groups.
        num_keys (int): number of distinct keys (required with ``keys``).
        margin_xy, margin_z (float): box enlargement before the test.
    """

    if gt.boxes.shape[0] == 0 or xyz.shape[0] == 0:
        return torch.full((xyz.shape[0],), -1, dtype=torch.int64, device=xyz.device)
    point_group, box_group = batch, gt.batch
    if keys is not None:
        point_group, box_group = batch * num_keys + keys, gt.batch * num_keys + gt_keys
    boxes = enlarge_boxes(gt.boxes, margin_xy, margin_z) if (margin_xy or margin_z) else gt.boxes
    return points_in_boxes(xyz.contiguous(), boxes.contiguous(), point_batch=point_group, box_batch=box_group,
                           box_origin='bottom')


def point_targets(xyz, batch, gt, num_classes):
    """Per-point segmentation labels and vote offsets from box membership.

    Returns:
        tuple: ``labels`` (N,) int64 (class of the containing box, ``num_classes`` = background) and
        ``offsets`` (N, 3) from the point to its box's gravity centre (zero for background).
    """
    box = assign_to_boxes(xyz, batch, gt)
    inside = box >= 0
    safe = box.clamp(min=0)
    if gt.boxes.shape[0]:
        labels = torch.where(inside, gt.labels[safe], torch.full_like(box, num_classes))
        centres = bottom_to_gravity(gt.boxes)[safe, :3]
        offsets = torch.where(inside[:, None], centres - xyz, torch.zeros_like(xyz))
    else:
        labels = torch.full_like(box, num_classes)
        offsets = torch.zeros_like(xyz)
    return labels, offsets
