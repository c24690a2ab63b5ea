"""Shared body of the fully sparse detectors (FSD-lite, FSDv2-lite).

Both run the sparse segmentor (VFE -> sparse UNet -> voxel-to-point neck) with a
:class:`~fsdlite.models.fsd.VoteSegHead`, sample foreground points with their voted centres,
turn them into *instances* (clusters for FSD-lite, virtual voxels for FSDv2-lite; subclasses
implement :meth:`instances`) and predict one box per instance with a
:class:`~fsdlite.models.fsd.ClusterHead`.  Everything between the data preprocessor and the
per-sample outputs is tensor code over sample/segment ids (no Python loop over samples).  An optional
:class:`~fsdlite.models.fsd.box_refiner.BoxRefiner` re-estimates the selected boxes before NMS.
"""
import math
from typing import NamedTuple, Optional

import torch

from ...registry import TASK_UTILS
from ...structures import Det3DDataSample, InstanceData
from ...structures.padded import valid_mask
from ..layers.builder import build_module
from ..layers.execution import execution_mode, gather
from ..lidar.sparse_segmentor import SparseSegmentor
from .gt import collect_gt
from .static import StaticDetectorMixin


class Instances(NamedTuple):
    """Instance features ``feats`` (K, D), reference points ``xyz`` (K, 3), ``batch`` (K,), ``labels``
    (K,) class of each instance or None (the head predicts it), and ``stats`` (scalars to log; empty in the fixed
    execution mode).  Fixed-shape runs (K slots) also give ``valid`` (K,) bool real instances, ``num`` () int64
    their count and ``dropped`` (D_i,) int64 overflow of the detector's instance bounds."""

    feats: torch.Tensor
    xyz: torch.Tensor
    batch: torch.Tensor
    labels: Optional[torch.Tensor]
    stats: dict
    valid: Optional[torch.Tensor] = None
    num: Optional[torch.Tensor] = None
    dropped: Optional[torch.Tensor] = None


def _same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def build_task_util(name, cfg, **values):
    """Build a TASK_UTILS config with ``values`` filled in; a contradicting explicit value raises."""
    cfg = dict(cfg)
    for key, value in values.items():
        if key in cfg and not _same(cfg[key], value):
            raise ValueError(f'{name}.{key}={cfg[key]!r} contradicts the model ({key}={value!r}); omit it or fix it')
        cfg[key] = value
    return TASK_UTILS.build(cfg)


class SparseDetectorBase(StaticDetectorMixin, SparseSegmentor):
    """Segmentor + vote head + foreground sampler + instance stage (subclass) + box head.

    Args:
        voxel_encoder, backbone, neck (dict): the segmentor's components.
        seg_head (dict): a ``VoteSegHead`` config.
        fg_sampler (dict): a ``ForegroundSampler`` config (TASK_UTILS); ``num_classes`` and
            ``point_range`` come from the model.
        bbox_head (dict): a ``ClusterHead`` config; ``in_channels`` and ``num_classes`` come from the model.
        data_preprocessor (dict): e.g. ``LidarDataPreprocessor``.
        voxel_size, point_range: the segmentor's voxel grid, shared by every part (see SparseSegmentor).
        refiner (dict, optional): a ``BoxRefiner`` config (``point_channels`` and ``num_classes`` come from the
            model): the boxes above the score threshold are re-estimated from the foreground points around them
            before NMS.
        bounds (dict): the bounds of the fixed-shape forward (:meth:`bound_schema`, :mod:`.static`), needed to run or
            export it (``fsdlite.deploy``); the model itself always runs the dynamic path.  Subclasses call
            ``_init_static`` last.

    ``forward`` modes (SparseSegmentor's dispatch): 'loss' -> dict of losses and logged counts;
    'predict' -> data samples with ``pred_instances_3d`` (``bboxes_3d`` (D_i, 7), ``scores_3d`` (D_i,),
    ``labels_3d`` (D_i,)); 'tensor' -> dict of raw outputs (seg outputs, ``cls_logits`` (K, C),
    ``box_codes`` (K, C, 8), ``instance_xyz`` / ``instance_batch`` / ``instance_labels``; with a refiner
    ``refined_boxes`` (K, 7), every instance's box refined).

    ``runtime_info`` (``fg_mode`` 'threshold' | 'topk', ``threshold_offset``) is set by
    :class:`~fsdlite.engine.fsd_hooks.FSDWarmupHook` during training; prediction always thresholds.
    """

    def __init__(self, voxel_encoder, backbone, neck, seg_head, fg_sampler, bbox_head, data_preprocessor=None,
                 voxel_size=None, point_range=None, refiner=None, init_cfg=None):
        super().__init__(voxel_encoder, backbone, neck, seg_head, data_preprocessor=data_preprocessor,
                         voxel_size=voxel_size, point_range=point_range, init_cfg=init_cfg)
        if not hasattr(self.seg_head, 'vote_layer'):
            raise TypeError(f'{type(self).__name__}: seg_head must predict votes (VoteSegHead), got '
                            f'{type(self.seg_head).__name__}')
        self.point_range = tuple(float(v) for v in self.voxel_encoder.point_range)
        self.fg_sampler = build_task_util('fg_sampler', fg_sampler, num_classes=self.num_classes,
                                          point_range=self.point_range)
        self._bbox_head_cfg = bbox_head
        self.refiner = None if refiner is None else build_module(
            refiner, point_channels=self.voxel_encoder.in_channels, num_classes=self.num_classes)
        self.runtime_info = dict(fg_mode='threshold', threshold_offset=0.0)

    def build_bbox_head(self, in_channels):
        """Build the box head for instance features of width ``in_channels`` (called by subclasses)."""
        self.bbox_head = build_module(self._bbox_head_cfg, in_channels=in_channels, num_classes=self.num_classes)
        if self.bbox_head.num_classes != self.num_classes:
            raise ValueError(f'bbox_head.num_classes={self.bbox_head.num_classes} contradicts the segmentation '
                             f'head (num_classes={self.num_classes})')

    def instances(self, inputs, point_feats, seg_outputs, fg):
        """Build :class:`Instances` from the foreground points, in either execution mode (implemented by
        subclasses)."""
        raise NotImplementedError

    def _forward_instances(self, inputs, training, return_fg=False):
        """Run everything up to the box head, in either execution mode; returns (seg_outputs, Instances,
        cls_logits, box_codes) (+ the foreground points with ``return_fg``).

        The fixed-shape run (:meth:`forward_static`) gives padded ``inputs`` with ``num_points`` and ``strict`` and
        runs this in the fixed execution mode (:mod:`~fsdlite.models.layers.execution`).
        """
        point_feats = self.extract_feat(inputs)
        seg_outputs = self.seg_head(point_feats)
        fg = self.sample_foreground(inputs, seg_outputs, training)
        inst = self.instances(inputs, point_feats, seg_outputs, fg)
        if execution_mode() == 'dynamic':
            inst.stats.update(num_fg_points=fg.point_index.numel(), num_fg_over_budget=int(fg.num_over_budget),
                              num_instances=inst.feats.shape[0])
        cls_logits, box_codes = self.bbox_head(inst.feats)
        if return_fg:
            return seg_outputs, inst, cls_logits, box_codes, fg
        return seg_outputs, inst, cls_logits, box_codes

    def sample_foreground(self, inputs, seg_outputs, training):
        """Foreground points with their voted centres: the sampler's thresholds and budgets (``runtime_info``'s
        warm-up mode while training); in the fixed execution mode the padded points and ``max_fg_points`` bound
        them (fixed-shape :class:`~fsdlite.models.fsd.fg_sampler.ForegroundPoints`)."""
        scores, codes, xyz = seg_outputs['seg_logits'].sigmoid(), seg_outputs['vote_codes'], inputs['points'][:, :3]
        mode = self.runtime_info['fg_mode'] if training else 'threshold'
        offset = self.runtime_info['threshold_offset'] if training else 0.0
        fixed = {}
        if execution_mode() == 'fixed':
            fixed = dict(valid=valid_mask(inputs['num_points'], xyz.shape[0], xyz.device),
                         bounds=self.bounds['max_fg_points'], strict=inputs['strict'])
        return self.fg_sampler(scores, codes, xyz, inputs['batch'], inputs['batch_size'], mode=mode,
                               threshold_offset=offset, **fixed)

    def _head_outputs(self, inputs):
        if inputs['voxel_coors'].shape[0] == 0:
            return None
        seg_outputs, inst, cls_logits, box_codes, fg = self._forward_instances(inputs, self.training, return_fg=True)
        out = dict(seg_outputs, cls_logits=cls_logits, box_codes=box_codes, instance_xyz=inst.xyz,
                   instance_batch=inst.batch, instance_labels=inst.labels)
        if self.refiner is not None:  # every instance's box, refined
            boxes, scores, labels = self.bbox_head.decode(cls_logits, box_codes, inst.xyz, inst.labels)
            decoded = dict(boxes=boxes, scores=scores, labels=labels, batch=inst.batch)
            out['refined_boxes'] = self.refine(inputs, seg_outputs, fg, decoded)['boxes']
        return out

    def loss(self, inputs, data_samples):
        """Segmentation, vote, classification and box losses; counts (fg points, instances, positives) are logged."""
        if data_samples is None:
            raise ValueError("mode='loss' needs data_samples with gt_instances_3d")
        device = inputs['points'].device
        gt = collect_gt(data_samples, device, self.num_classes)
        if inputs['voxel_coors'].shape[0] == 0:
            zero = sum(p.sum() for p in self.parameters()) * 0.0
            return dict(loss_seg=zero, loss_vote=zero, loss_cls=zero, loss_bbox=zero)
        seg_outputs, inst, cls_logits, box_codes, fg = self._forward_instances(inputs, True, return_fg=True)
        targets = self.seg_head.get_targets(points=inputs['points'], batch=inputs['batch'], gt=gt)
        losses = self.seg_head.loss(seg_outputs, targets)
        losses.update(self.bbox_head.loss(cls_logits, box_codes, inst.xyz, inst.batch, inst.labels, gt))
        if self.refiner is not None:  # trained on the first stage's boxes (no gradient into it) and noisy truth
            boxes, _, labels = self.bbox_head.decode(cls_logits, box_codes, inst.xyz, inst.labels)
            probs = seg_outputs['seg_logits'].detach().sigmoid().index_select(0, fg.point_index)
            losses.update(self.refiner.loss(inputs['points'].index_select(0, fg.point_index), probs, fg.batch,
                                            boxes.detach(), inst.batch, labels, gt))
        losses.update({k: torch.as_tensor(float(v), device=device) for k, v in inst.stats.items()})
        return losses

    def predict(self, inputs, data_samples=None):
        """Boxes per sample in ``pred_instances_3d`` (empty when a sample has no voxel or detection)."""
        device = inputs['points'].device
        boxes, scores = torch.zeros(0, 7, device=device), torch.zeros(0, device=device)
        labels = batch = torch.zeros(0, dtype=torch.int64, device=device)
        if inputs['voxel_coors'].shape[0]:
            seg_outputs, inst, cls_logits, box_codes, fg = self._forward_instances(inputs, False, return_fg=True)
            sel = self.refine(inputs, seg_outputs, fg, self.bbox_head.select(cls_logits, box_codes, inst.xyz,
                                                                             inst.batch, inst.labels))
            keep = self.bbox_head.nms(sel['boxes'], sel['scores'], sel['labels'], sel['batch'])
            boxes, scores, labels, batch = (sel[k].index_select(0, keep)
                                            for k in ('boxes', 'scores', 'labels', 'batch'))
        return self.to_samples(boxes, scores, labels, batch, inputs['batch_size'], data_samples)

    def refiner_pairs(self, inputs, fg, points, selected):
        """The boxes the refiner takes from ``selected`` (``ClusterHead.select``'s dict, non-empty): ``top`` (R,)
        their rows, the refiner's ``max_boxes`` highest-scoring ones (the fixed mode's padding rows rank last and
        are marked in ``box_valid``), and their :class:`~fsdlite.models.fsd.box_refiner.BoxPointPairs` with the
        foreground points ``fg``, whose rows of ``inputs['points']`` are ``points`` (P, C) (the fixed mode packs
        the pairs into the ``max_refiner_pairs`` bound, if given).

        Returns:
            tuple: ``top`` (R,) int64, ``box_valid`` (R,) bool or None (dynamic mode), the chosen boxes (R, 7),
            the pairs.
        """
        xyz = points[:, :3]
        boxes, scores, box_batch = selected['boxes'], selected['scores'], selected['batch']
        take = min(self.refiner.max_boxes, boxes.shape[0])
        if execution_mode() == 'dynamic':
            top = scores.topk(take).indices
            chosen = boxes.index_select(0, top)
            return top, None, chosen, self.refiner.pairs(xyz, fg.batch, chosen, box_batch.index_select(0, top))
        box_valid = torch.arange(boxes.shape[0], device=boxes.device) < selected['num_boxes']
        top = torch.where(box_valid, scores, torch.full_like(scores, -math.inf)).topk(take).indices
        box_valid, chosen = box_valid.index_select(0, top), boxes.index_select(0, top)
        point_valid = torch.arange(fg.point_index.shape[0], device=xyz.device) < fg.num_valid
        max_pairs = self.bounds['max_refiner_pairs'] if 'max_refiner_pairs' in self.bounds else None
        return top, box_valid, chosen, self.refiner.pairs(xyz, fg.batch, chosen, box_batch.index_select(0, top),
                                                          point_valid, box_valid, max_pairs, inputs['strict'])

    def refine(self, inputs, seg_outputs, fg, selected):
        """The selected boxes (``ClusterHead.select``'s dict) with ``boxes`` moved by the refiner, if the model has
        one, from the foreground points ``fg`` around them (before NMS, in either execution mode; the fixed mode's
        padding rows stay padding), and ``refiner_dropped`` the pairs over the fixed mode's ``max_refiner_pairs``.
        Only the refiner's ``max_boxes`` highest-scoring boxes are refined (:meth:`refiner_pairs`)."""
        if self.refiner is None or not selected['boxes'].shape[0]:
            return selected
        points, probs = (gather(t, fg.point_index) for t in (inputs['points'], seg_outputs['seg_logits'].sigmoid()))
        top, box_valid, chosen, pairs = self.refiner_pairs(inputs, fg, points, selected)
        boxes = selected['boxes']
        refined = self.refiner.refine(points, probs, chosen, selected['labels'].index_select(0, top), pairs)
        if box_valid is not None:
            refined = torch.where(box_valid[:, None], refined, chosen)
        return dict(selected, boxes=boxes.scatter(0, top[:, None].expand(-1, boxes.shape[1]), refined),
                    refiner_dropped=pairs.dropped)

    @staticmethod
    def to_samples(boxes, scores, labels, batch, batch_size, data_samples=None):
        """Split flat detections by sample into ``pred_instances_3d`` of the data samples (created when None)."""
        if data_samples is None:
            data_samples = [Det3DDataSample() for _ in range(batch_size)]
        order = torch.argsort(batch, stable=True)
        sizes = torch.bincount(batch, minlength=batch_size).tolist()
        for sample, b, s, lab in zip(data_samples, boxes[order].split(sizes), scores[order].split(sizes),
                                     labels[order].split(sizes)):
            sample.pred_instances_3d = InstanceData(bboxes_3d=b.detach(), scores_3d=s.detach(), labels_3d=lab)
        return data_samples
