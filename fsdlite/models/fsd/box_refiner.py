"""Second stage: re-estimate each detected box from the points around it, seen in the box's own frame.

The first stage places a box from a cluster's mean voted centre and max-pooled point features in lidar axes; small
centre errors (a few tenths of a metre) are what keep found cars under IoU 0.7. This stage takes the foreground
points (the detector's sampled ones, of any class and cluster) inside the box grown by ``enlarge``, expresses them
in the box frame (along the heading, across it, up from the centre), encodes the set with
:class:`~fsdlite.models.fsd.sir.SIR` and regresses a residual per class::

    [du, dv, dz] = centre offset in the box frame (m); [log l'/l, log w'/w, log h'/h]; dyaw (rad, wrapped to the
    coder's yaw period)

Training boxes are the first stage's decoded boxes of every instance (detached) plus ``jitter_per_gt`` copies of
each ground-truth box with noise; a box regresses the ground-truth box of its sample and class it overlaps most in
BEV, if that IoU reaches ``pos_iou``. Scores are not changed.
"""
import math
from typing import NamedTuple

import torch
from mmengine.model import BaseModule
from torch import nn

from fsdlite.ops import boxes_iou_bev

from ...registry import MODELS
from ...structures import bottom_to_gravity
from ..layers.execution import execution_mode, gather
from ..layers.static_ops import gather_rows, masked_topk
from .indexing import mask_to_padded_index
from .sir import SIR, linear_norm_act

RESIDUAL_SIZE = 7
# a point's rank among the points of a box is a fixed permutation of its index: (index * A) mod P with P a prime
# above any point count (so no two points tie) and A < P; float32 holds every value exactly (P < 2^24)
HASH_PRIME, HASH_FACTOR = 16777213, 3636107


def point_rank_key(index):
    """(N,) int64 key in [0, HASH_PRIME) of point indices (N,): distinct for distinct indices below HASH_PRIME."""
    return (index * HASH_FACTOR) % HASH_PRIME


def box_frame(xyz, boxes):
    """Points (P, 3) in the frame of their boxes (P, 7) (bottom-centre z): (P, 3) along the heading, across it and
    up from the box centre's height."""
    centre = bottom_to_gravity(boxes)
    d = xyz - centre[:, :3]
    c, s = torch.cos(boxes[:, 6]), torch.sin(boxes[:, 6])
    return torch.stack([d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c, d[:, 2]], dim=1)


def box_point_pairs(xyz, point_batch, boxes, box_batch, enlarge_xy, enlarge_z, max_points=None, chunk=256):
    """Every (box, point) pair of the same sample with the point inside the box grown by ``enlarge_xy`` on each side
    and ``enlarge_z`` below and above.

    Args:
        xyz (Tensor): (N, 3) points; point_batch (Tensor): (N,) their sample ids.
        boxes (Tensor): (M, 7) bottom-centre boxes; box_batch (Tensor): (M,) their sample ids.
        max_points (int, optional): keep at most this many points per box: those of lowest
            :func:`point_rank_key`, so the same frame always gives the same subset.
    Returns:
        tuple: ``box`` (P,) int64, ``point`` (P,) int64 and ``local`` (P, 3) the point in the box frame
        (:func:`box_frame`), grouped by box.
    """
    boxes_out, points_out = [], []
    reach = (0.5 * boxes[:, 3:5] + enlarge_xy).pow(2).sum(dim=1)  # squared half-diagonal of the grown footprint
    for start in range(0, boxes.shape[0], chunk):  # bounds the (boxes x points) distance matrix
        sl = slice(start, start + chunk)
        d2 = (xyz[None, :, :2] - boxes[sl, None, :2]).pow(2).sum(-1)
        near = (d2 <= reach[sl, None]) & (box_batch[sl, None] == point_batch[None, :])
        b, p = near.nonzero(as_tuple=True)
        boxes_out.append(b + start)
        points_out.append(p)
    box = torch.cat(boxes_out) if boxes_out else xyz.new_zeros(0, dtype=torch.long)
    point = torch.cat(points_out) if points_out else xyz.new_zeros(0, dtype=torch.long)
    local = box_frame(xyz.index_select(0, point), boxes.index_select(0, box))
    half = 0.5 * boxes.index_select(0, box)[:, 3:6] + local.new_tensor([enlarge_xy, enlarge_xy, enlarge_z])
    inside = (local.abs() <= half).all(dim=1)
    box, point, local = box[inside], point[inside], local[inside]
    if max_points is not None and box.numel():
        order = torch.argsort(box * HASH_PRIME + point_rank_key(point))
        box, point, local = box[order], point[order], local[order]
        first = torch.searchsorted(box, box, right=False)
        keep = torch.arange(box.numel(), device=box.device) - first < max_points
        box, point, local = box[keep], point[keep], local[keep]
    return box, point, local


class BoxPointPairs(NamedTuple):
    """The (box, point) pairs a :class:`BoxRefiner` encodes (P of them; in the fixed execution mode padded, empty
    rows pointing at the dump box M and dump point N)."""
    box: torch.Tensor      #: (P,) int64 box row
    point: torch.Tensor    #: (P,) int64 point row
    local: torch.Tensor    #: (P, 3) the point in the box frame (:func:`box_frame`; zeros in empty rows)
    dropped: torch.Tensor  #: () int64 pairs over the ``max_pairs`` bound of the fixed mode (else 0)


def box_point_slots(xyz, point_batch, point_valid, boxes, box_batch, box_valid, enlarge_xy, enlarge_z, max_points,
                    max_pairs=None, strict=None):
    """Fixed shapes: :func:`box_point_pairs` as ``max_points`` slots per box (the same points, in another order),
    optionally packed into ``max_pairs`` rows (the boxes' real pairs first, in slot order).

    Args:
        xyz, point_batch: as :func:`box_point_pairs`; point_valid (Tensor): (N,) bool real (not padding) points.
        boxes, box_batch: as :func:`box_point_pairs`; box_valid (Tensor): (M,) bool real boxes.
        max_pairs (int, optional): rows of the result (the bound ``max_refiner_pairs``); default M * S.
        strict (bool, optional): raise :class:`~fsdlite.structures.bounds.BoundExceededError` when more pairs
            than ``max_pairs`` are real (default: eager mode); otherwise the last ones are dropped and counted.
    Returns:
        BoxPointPairs: P = ``max_pairs`` or M * S rows, S = ``max_points``.
    """
    num_boxes, num_points = boxes.shape[0], xyz.shape[0]
    centre = bottom_to_gravity(boxes)
    # (M, N) per coordinate, not (M, N, 3): ONNX Runtime broadcasts a last axis of 3 element by element
    dx, dy, dz = (xyz[None, :, i] - centre[:, i:i + 1] for i in range(3))
    c, s = torch.cos(boxes[:, 6:7]), torch.sin(boxes[:, 6:7])
    u, v = dx * c + dy * s, -dx * s + dy * c
    half = 0.5 * boxes[:, 3:6]
    inside = ((u.abs() <= half[:, 0:1] + enlarge_xy) & (v.abs() <= half[:, 1:2] + enlarge_xy)
              & (dz.abs() <= half[:, 2:3] + enlarge_z) & (box_batch[:, None] == point_batch[None, :])
              & point_valid[None, :] & box_valid[:, None])
    key = point_rank_key(torch.arange(num_points, device=xyz.device)).to(xyz.dtype)
    top = masked_topk(-key.expand(num_boxes, num_points), max_points, valid=inside)  # lowest keys first
    point = top.indices.reshape(-1)
    owner = torch.arange(num_boxes, device=xyz.device).repeat_interleave(max_points)
    dropped = torch.zeros((), dtype=torch.long, device=xyz.device)
    if max_pairs is not None:  # the real slots first: the encoder then runs on max_pairs rows, not M * S
        slot, _, dropped = mask_to_padded_index(point < num_points, max_pairs, 'max_refiner_pairs', strict=strict)
        point, owner = gather_rows(point, slot, fill=num_points), gather_rows(owner, slot, fill=num_boxes)
    box = torch.where(point < num_points, owner, torch.full_like(owner, num_boxes))
    local = box_frame(gather_rows(xyz, point), gather_rows(boxes, box))
    return BoxPointPairs(box, point, local, dropped)


@MODELS.register_module()
class BoxRefiner(BaseModule):
    """Point-set encoder over each box's surroundings + per-class residual regression (module docstring).

    Args:
        point_channels (int): point feature width C (xyz + C - 3 more); with ``num_classes`` foreground
            probabilities per point the encoder sees ``6 + (C - 3) + num_classes`` numbers per point.
        num_classes (int): K.
        sir (dict): the :class:`SIR` options besides ``in_channels`` (block and gate widths).
        shared_channels (sequence[int]): widths of the Linear+LN+GELU layers before the regression.
        enlarge (tuple): (xy, z) metres the box is grown by to gather its points.
        max_points (int): points per box the encoder sees at most (a fixed subset of them).
        max_boxes (int): at inference, the boxes of a batch it refines at most: the highest-scoring ones (the
            others keep the first stage's box). It bounds the fixed-shape graph's refiner work (boxes x points
            slots) below the detector's ``max_boxes``; a trained FSD-lite selects 30-110 boxes on a KITTI frame.
        pos_iou (float): BEV IoU with a ground-truth box from which a training box regresses it.
        jitter_per_gt (int): noisy ground-truth copies added as training boxes per ground-truth box.
        jitter (tuple): (centre m, log size, yaw rad) standard deviations of that noise.
        yaw_period (float): pi (orientation only) or 2 pi.
        loss_bbox (dict): residual regression loss config (called as ``loss(pred, target, weight, avg_factor=)``).
    """

    def __init__(self, point_channels, num_classes, sir=dict(block_channels=((64, 64), (64, 64))),
                 shared_channels=(128,), enlarge=(0.5, 0.3), max_points=256, max_boxes=64, pos_iou=0.3,
                 jitter_per_gt=2, jitter=(0.3, 0.1, 0.15), yaw_period=math.pi,
                 loss_bbox=dict(type='L1Loss', loss_weight=1.0), init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if point_channels < 3:
            raise ValueError(f'BoxRefiner: point_channels must be >= 3 (xyz first), got {point_channels}')
        if len(enlarge) != 2 or min(enlarge) < 0:
            raise ValueError(f'BoxRefiner: enlarge must be (xy, z) metres >= 0, got {enlarge}')
        if int(max_points) < 1 or int(max_boxes) < 1 or len(jitter) != 3:
            raise ValueError(f'BoxRefiner: max_points and max_boxes must be >= 1 and jitter 3 numbers, got '
                             f'{max_points}, {max_boxes}, {jitter}')
        self.num_classes = int(num_classes)
        self.enlarge = tuple(float(e) for e in enlarge)
        self.max_points = int(max_points)
        self.max_boxes = int(max_boxes)
        self.pos_iou = float(pos_iou)
        self.jitter_per_gt = int(jitter_per_gt)
        self.jitter = tuple(float(j) for j in jitter)
        self.yaw_period = float(yaw_period)
        in_channels = 6 + point_channels - 3 + self.num_classes
        self.sir = SIR(in_channels, xyz_normalizer=(2.0, 1.0, 1.0), **sir)
        layers, width = [], self.sir.out_channels
        for c in shared_channels:
            layers.append(linear_norm_act(width, c))
            width = c
        self.shared = nn.Sequential(*layers)
        self.reg = nn.Linear(width, self.num_classes * RESIDUAL_SIZE)
        nn.init.zeros_(self.reg.weight)  # starts as the identity: boxes pass unchanged
        nn.init.zeros_(self.reg.bias)
        self.loss_bbox = MODELS.build(dict(loss_bbox))

    def pairs(self, xyz, point_batch, boxes, box_batch, point_valid=None, box_valid=None, max_pairs=None,
              strict=None):
        """The (box, point) pairs the encoder sees, points (N, 3) and sample ids (N,), boxes (M, 7) and sample ids
        (M,): :func:`box_point_pairs`, in the fixed execution mode :func:`box_point_slots` (``point_valid`` (N,) and
        ``box_valid`` (M,) mark the real rows; ``max_pairs``: its rows). Returns :class:`BoxPointPairs`."""
        if execution_mode() == 'fixed':
            return box_point_slots(xyz, point_batch, point_valid, boxes, box_batch, box_valid, *self.enlarge,
                                   self.max_points, max_pairs, strict)
        box, point, local = box_point_pairs(xyz, point_batch, boxes, box_batch, *self.enlarge,
                                            max_points=self.max_points)
        return BoxPointPairs(box, point, local, box.new_zeros(()))

    def forward(self, points, point_probs, boxes, labels, pairs):
        """Residuals (M, 7) of boxes (M, 7) of classes ``labels`` (M,) from points (N, C) with foreground
        probabilities (N, K) and the boxes' :class:`BoxPointPairs` (:meth:`pairs`); zeros for a box with no
        point around it."""
        box, point, local = pairs.box, pairs.point, pairs.local
        dims = gather(boxes, box)[:, 3:6].clamp(min=1e-3)  # gather: the empty slots of the fixed mode read zeros
        feats = torch.cat([local / (0.5 * dims), gather(points, point)[:, 3:], local, gather(point_probs, point)],
                          dim=1)
        cluster_feats, _ = self.sir(feats, local, box, boxes.shape[0], local.new_zeros(boxes.shape[0], 3))
        out = self.reg(self.shared(cluster_feats)).view(-1, self.num_classes, RESIDUAL_SIZE)
        index = labels.clamp(0, self.num_classes - 1)[:, None, None].expand(-1, 1, RESIDUAL_SIZE)
        return out.gather(1, index)[:, 0]

    def encode(self, boxes, targets):
        """Residuals (M, 7) taking boxes (M, 7) to targets (M, 7) (both bottom-centre)."""
        offset = box_frame(bottom_to_gravity(targets)[:, :3], boxes)
        dyaw = targets[:, 6] - boxes[:, 6]
        dyaw = dyaw - torch.round(dyaw / self.yaw_period) * self.yaw_period
        return torch.cat([offset, (targets[:, 3:6] / boxes[:, 3:6]).log(), dyaw[:, None]], dim=1)

    def decode(self, boxes, residuals):
        """Boxes (M, 7) moved by residuals (M, 7) (inverse of :meth:`encode`)."""
        c, s = torch.cos(boxes[:, 6]), torch.sin(boxes[:, 6])
        du, dv = residuals[:, 0], residuals[:, 1]
        dims = boxes[:, 3:6] * residuals[:, 3:6].clamp(max=2.0).exp()
        centre_z = boxes[:, 2] + 0.5 * boxes[:, 5] + residuals[:, 2]
        return torch.stack([boxes[:, 0] + du * c - dv * s, boxes[:, 1] + du * s + dv * c, centre_z - 0.5 * dims[:, 2],
                            dims[:, 0], dims[:, 1], dims[:, 2], boxes[:, 6] + residuals[:, 6]], dim=1)

    def refine(self, points, point_probs, boxes, labels, pairs):
        """Refined boxes (M, 7) (arguments of :meth:`forward`)."""
        if not boxes.shape[0]:
            return boxes
        return self.decode(boxes, self.forward(points, point_probs, boxes, labels, pairs))

    def training_boxes(self, proposals, proposal_batch, proposal_labels, gt):
        """The first stage's boxes plus noisy ground-truth copies: (boxes (M, 7), batch (M,), labels (M,))."""
        boxes, batch, labels = [proposals.detach()], [proposal_batch], [proposal_labels]
        if self.jitter_per_gt and gt.boxes.shape[0]:
            g = gt.boxes.repeat(self.jitter_per_gt, 1)
            noise = torch.randn_like(g)
            centre, size, yaw = self.jitter
            jittered = torch.cat([g[:, :2] + centre * noise[:, :2], g[:, 2:3] + 0.3 * centre * noise[:, 2:3],
                                  g[:, 3:6] * (size * noise[:, 3:6]).exp(), g[:, 6:7] + yaw * noise[:, 6:7]], dim=1)
            boxes.append(jittered)
            batch.append(gt.batch.repeat(self.jitter_per_gt))
            labels.append(gt.labels.repeat(self.jitter_per_gt))
        return torch.cat(boxes), torch.cat(batch), torch.cat(labels)

    def get_targets(self, boxes, batch, labels, gt):
        """Ground-truth box (M, 7) each training box regresses and (M,) bool whether it has one."""
        pos = torch.zeros(boxes.shape[0], dtype=torch.bool, device=boxes.device)
        targets = boxes.detach().clone()
        if not gt.boxes.shape[0] or not boxes.shape[0]:
            return targets, pos
        iou = boxes_iou_bev(boxes.detach().float().contiguous(), gt.boxes.float().contiguous())
        same = (batch[:, None] == gt.batch[None, :]) & (labels[:, None] == gt.labels[None, :])
        best, index = torch.where(same, iou, torch.zeros_like(iou)).max(dim=1)
        pos = best >= self.pos_iou
        return torch.where(pos[:, None], gt.boxes[index], targets), pos

    def loss(self, points, point_probs, point_batch, proposals, proposal_batch, proposal_labels, gt):
        """``loss_refine`` (averaged over the training boxes with a target) and their count ``num_refine_pos``."""
        boxes, batch, labels = self.training_boxes(proposals, proposal_batch, proposal_labels, gt)
        targets, pos = self.get_targets(boxes, batch, labels, gt)
        keep = pos.nonzero()[:, 0]  # boxes without a target teach nothing: leave them out
        boxes, batch, labels, targets = (t.index_select(0, keep) for t in (boxes, batch, labels, targets))
        pairs = self.pairs(points[:, :3], point_batch, boxes, batch)
        residuals = self.forward(points, point_probs, boxes, labels, pairs)
        loss = self.loss_bbox(residuals, self.encode(boxes, targets).detach(), avg_factor=max(keep.numel(), 1))
        return dict(loss_refine=loss, num_refine_pos=torch.tensor(float(keep.numel()), device=boxes.device))
