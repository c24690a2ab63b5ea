"""Box head over instance features (FSD clusters or FSDv2 virtual voxels).

A shared MLP feeds two per-class ("per-task") heads: a classification logit per class and an
8-number box code per class (:class:`~fsdlite.models.fsd.coders.PointBoxCoder`, relative to each
instance's reference point).  Two labelling modes:

* ``class_given=True`` (FSD-lite): every cluster already has a class (the class it was grouped
  in); only that class's logit and box are trained and used.
* ``class_given=False`` (FSDv2-lite): every class logit is trained (one-hot targets); prediction
  takes the best class.

Target assignment: an instance is positive for a ground-truth box of its sample (and class, when
given) if its reference point lies inside the box enlarged by ``assign_margin``; it then regresses
that box.  Prediction: score threshold, rotated BEV NMS per sample and class.
"""
import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import nn

from fsdlite.ops import batched_nms_bev
from fsdlite.structures.bounds import check_bound

from ...registry import MODELS, TASK_UTILS
from ..layers.static_ops import gather_rows, masked_topk
from .gt import assign_to_boxes
from .indexing import mask_to_index
from .sir import linear_norm_act

DEFAULT_TEST_CFG = dict(score_thr=0.1, nms_iou_thr=0.25, pre_max=4096, post_max=200)


@MODELS.register_module()
class ClusterHead(BaseModule):
    """Shared MLP + per-class classification and box heads.

    Args:
        in_channels (int): instance feature width.
        num_classes (int): C.
        shared_channels (sequence[int]): widths of the shared Linear+LN+GELU layers.
        class_given (bool): see the module docstring.
        box_coder (dict): a TASK_UTILS coder config.
        loss_cls (dict): sigmoid classification loss config (called as ``loss(logits, targets, weight,
            avg_factor=...)``).
        loss_bbox (dict): box code regression loss config (same call convention).
        code_weights (sequence[float]): per box-code weights (8).
        assign_margin (sequence[float]): (xy, z) enlargement of ground-truth boxes for assignment.
        test_cfg (dict): ``score_thr``, ``nms_iou_thr``, ``pre_max``, ``post_max``.
    """

    def __init__(self, in_channels, num_classes, shared_channels=(256, 256), class_given=True,
                 box_coder=dict(type='PointBoxCoder'),
                 loss_cls=dict(type='SigmoidFocalLoss', gamma=2.0, alpha=0.25, loss_weight=1.0),
                 loss_bbox=dict(type='L1Loss', loss_weight=1.0), code_weights=None, assign_margin=(0.5, 0.5),
                 test_cfg=None, init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.num_classes = int(num_classes)
        self.class_given = bool(class_given)
        self.coder = TASK_UTILS.build(dict(box_coder))
        layers, width = [], in_channels
        for c in shared_channels:
            layers.append(linear_norm_act(width, c))
            width = c
        self.shared = nn.Sequential(*layers)
        self.cls = nn.Linear(width, self.num_classes)
        self.reg = nn.Linear(width, self.num_classes * self.coder.code_size)
        self.loss_cls = MODELS.build(dict(loss_cls))
        self.loss_bbox = MODELS.build(dict(loss_bbox))
        weights = [1.0] * self.coder.code_size if code_weights is None else [float(w) for w in code_weights]
        if len(weights) != self.coder.code_size:
            raise ValueError(f'ClusterHead: code_weights needs {self.coder.code_size} values, got {code_weights}')
        self.register_buffer('code_weights', torch.tensor(weights), persistent=False)
        self.assign_margin = tuple(float(m) for m in assign_margin)
        self.test_cfg = {**DEFAULT_TEST_CFG, **(test_cfg or {})}
        nn.init.constant_(self.cls.bias, -4.6)  # prior probability ~0.01 keeps early focal losses small

    def forward(self, feats):
        """feats (K, D) -> class logits (K, C) and box codes (K, C, 8)."""
        x = self.shared(feats)
        return self.cls(x), self.reg(x).view(-1, self.num_classes, self.coder.code_size)

    def _check_class(self, ref_class):
        if self.class_given and ref_class is None:
            raise ValueError('ClusterHead: class_given=True needs ref_class (the class of every instance)')

    def get_targets(self, ref_xyz, ref_batch, ref_class, gt):
        """Assign instances to ground truth.

        Returns:
            tuple: ``labels`` (K,) int64 (class of the matched box; C = negative) and ``box_targets``
            (K, 8) codes of the matched boxes (rows of negatives are zeros).
        """
        self._check_class(ref_class)
        keys = dict(keys=ref_class, gt_keys=gt.labels, num_keys=self.num_classes) if self.class_given else {}
        box = assign_to_boxes(ref_xyz, ref_batch, gt, margin_xy=self.assign_margin[0],
                              margin_z=self.assign_margin[1], **keys)
        pos = box >= 0
        labels = torch.full_like(box, self.num_classes)
        targets = ref_xyz.new_zeros(ref_xyz.shape[0], self.coder.code_size)
        if gt.boxes.shape[0]:
            safe = box.clamp(min=0)
            labels = torch.where(pos, gt.labels[safe], labels)
            targets = torch.where(pos[:, None], self.coder.encode(gt.boxes[safe], ref_xyz.detach()), targets)
        return labels, targets

    def loss(self, cls_logits, box_codes, ref_xyz, ref_batch, ref_class, gt):
        """Classification and box losses (averaged over positives) plus the positive count."""
        labels, targets = self.get_targets(ref_xyz, ref_batch, ref_class, gt)
        pos = labels < self.num_classes
        num_pos = pos.sum()
        avg = num_pos.clamp(min=1).to(cls_logits.dtype)
        onehot = F.one_hot(labels, self.num_classes + 1)[:, :self.num_classes].to(cls_logits.dtype)
        weight = (F.one_hot(ref_class, self.num_classes).to(cls_logits.dtype) if self.class_given
                  else torch.ones_like(onehot))
        loss_cls = self.loss_cls(cls_logits, onehot, weight, avg_factor=avg)
        reg_class = ref_class if self.class_given else labels.clamp(max=self.num_classes - 1)
        codes = box_codes[torch.arange(box_codes.shape[0], device=box_codes.device), reg_class]
        box_weight = pos[:, None].to(codes.dtype) * self.code_weights.to(codes.dtype)
        loss_bbox = self.loss_bbox(codes, targets, box_weight, avg_factor=avg)
        return dict(loss_cls=loss_cls, loss_bbox=loss_bbox, num_pos=num_pos.detach().float())

    def decode(self, cls_logits, box_codes, ref_xyz, ref_class=None):
        """Score, class and box of every instance (no threshold; fixed shapes).

        Returns:
            tuple: ``boxes`` (K, 7), ``scores`` (K,), ``labels`` (K,) int64 (``ref_class`` when class_given, else
            the best class, ties to the lower class).
        """
        self._check_class(ref_class)
        probs = cls_logits.sigmoid()
        if self.class_given:
            labels = ref_class
            scores = probs.gather(1, labels[:, None])[:, 0]
        else:
            scores, labels = probs.max(dim=1)
        codes = box_codes.gather(1, labels[:, None, None].expand(-1, 1, box_codes.shape[2]))[:, 0]
        return self.coder.decode(codes, ref_xyz), scores, labels

    def nms(self, boxes, scores, labels, batch):
        """Indices kept by rotated BEV NMS per sample and class (``test_cfg``'s IoU, pre_max, post_max)."""
        if not boxes.shape[0]:
            return torch.zeros(0, dtype=torch.long, device=boxes.device)
        return batched_nms_bev(boxes, scores, labels, self.test_cfg['nms_iou_thr'], pre_max=self.test_cfg['pre_max'],
                               post_max=self.test_cfg['post_max'], batch=batch)

    def select(self, cls_logits, box_codes, ref_xyz, ref_batch, ref_class=None, valid=None, max_boxes=None,
               strict=None):
        """Decoded boxes above ``score_thr``, before NMS.

        Args:
            cls_logits, box_codes, ref_xyz, ref_batch, ref_class: per instance (K rows; ``ref_class`` None when not
                class_given).
            valid (Tensor, optional): (K,) bool real instances (padded instance slots).
            max_boxes (int, optional): fixed shapes: M, the bound on the boxes (name ``'max_boxes'``); the M best
                are kept, best first.
            strict (bool, optional): with ``max_boxes``, raise on overflow (default: eager mode; exporting keeps
                the M best and counts the rest).
        Returns:
            dict: ``boxes`` (D, 7), ``scores`` (D,), ``labels`` (D,), ``batch`` (D,) in instance order; with
            ``max_boxes`` D = M (rows ``>= num_boxes`` zeros), ``num_boxes`` () int64 and ``dropped`` () int64.
        """
        if valid is not None and ref_class is not None:
            ref_class = ref_class.clamp(0, self.num_classes - 1)  # padding slots may hold any class
        boxes, scores, labels = self.decode(cls_logits, box_codes, ref_xyz, ref_class)
        cand = scores > self.test_cfg['score_thr']
        if valid is not None:
            cand = cand & valid
        if max_boxes is None:
            keep = mask_to_index(cand)
            return dict(boxes=boxes.index_select(0, keep), scores=scores.index_select(0, keep),
                        labels=labels.index_select(0, keep), batch=ref_batch.index_select(0, keep))
        dropped = check_bound(cand.long().sum(), max_boxes, 'max_boxes', strict=strict)
        top = masked_topk(scores, max_boxes, valid=cand)
        return dict(boxes=gather_rows(boxes, top.indices), scores=gather_rows(scores, top.indices),
                    labels=gather_rows(labels, top.indices), batch=gather_rows(ref_batch, top.indices),
                    num_boxes=top.num_selected, dropped=dropped)
