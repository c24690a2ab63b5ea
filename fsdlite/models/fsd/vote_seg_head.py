"""VoteSegHead: class-wise sigmoid foreground segmentation plus per-class centre votes.

Extends :class:`~fsdlite.models.lidar.PointSegHead` with a vote branch predicting, for every point
and class, the sign-sqrt coded offset to the gravity centre of the object it belongs to
(:func:`~fsdlite.models.fsd.coders.encode_vote`).  Targets come from box membership
(``fsdlite.ops.points_in_boxes`` on the ground-truth boxes), not from a semantic mask, so any
dataset with boxes trains it.
"""
import torch
from torch import nn

from ...registry import MODELS
from ..lidar.point_seg_head import PointSegHead
from ..layers.norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG
from .coders import encode_vote
from .gt import point_targets


@MODELS.register_module()
class VoteSegHead(PointSegHead):
    """Point segmentation (focal loss) + per-class centre votes (L1 on the coded offsets of foreground points).

    Args:
        loss_vote (dict): regression loss called ``(pred, target, weight, avg_factor=...)``.
        in_channels, num_classes, hidden_channels, norm_cfg, act_cfg, loss_seg, score_thr, ignore_index:
            as :class:`PointSegHead`.
    Outputs of :meth:`forward`: ``seg_logits`` (P, C), ``seg_feats`` (P, F), ``vote_codes`` (P, C, 3).
    """

    def __init__(self, in_channels, num_classes, hidden_channels=(128, 128), norm_cfg=DEFAULT_NORM_CFG,
                 act_cfg=DEFAULT_ACT_CFG, loss_seg=dict(type='SigmoidFocalLoss', gamma=3.0, alpha=0.8),
                 score_thr=0.5, ignore_index=-1, loss_vote=dict(type='L1Loss', loss_weight=1.0)):
        super().__init__(in_channels, num_classes, hidden_channels=hidden_channels, norm_cfg=norm_cfg,
                         act_cfg=act_cfg, loss_seg=loss_seg, score_thr=score_thr, ignore_index=ignore_index)
        self.vote_layer = nn.Linear(self.seg_feat_channels, self.num_classes * 3)
        self.loss_vote = MODELS.build(dict(loss_vote))

    def forward(self, point_feats):
        """(P, C_in) point features -> dict with ``seg_logits``, ``seg_feats`` and ``vote_codes`` (P, C, 3)."""
        outputs = super().forward(point_feats)
        outputs['vote_codes'] = self.vote_layer(outputs['seg_feats']).view(-1, self.num_classes, 3)
        return outputs

    def get_targets(self, point_labels=None, *, points, batch, gt, **context):
        """Targets from box membership: ``labels`` (P,) (C = background) and ``vote_targets`` (P, 3).

        Args:
            point_labels: unused (labels are derived from the boxes); kept for the parent's signature.
            points (Tensor): (P, >=3) points.
            batch (Tensor): (P,) sample ids.
            gt (GtBatch): the batch's ground-truth boxes.
        """
        labels, offsets = point_targets(points[:, :3], batch, gt, self.num_classes)
        return dict(labels=labels, vote_targets=encode_vote(offsets))

    def loss(self, outputs, targets):
        """``loss_seg`` (focal, averaged over foreground points) and ``loss_vote`` (L1 over foreground points)."""
        losses = super().loss(outputs, targets)
        labels = targets['labels']
        fg = labels < self.num_classes
        rows = torch.arange(labels.shape[0], device=labels.device)
        pred = outputs['vote_codes'][rows, labels.clamp(max=self.num_classes - 1)]
        weight = fg[:, None].to(pred.dtype).expand_as(pred)
        avg = (fg.sum() * 3).clamp(min=1).to(pred.dtype)
        losses['loss_vote'] = self.loss_vote(pred, targets['vote_targets'].to(pred.dtype), weight, avg_factor=avg)
        return losses

    def distill_loss(self, outputs, teacher_outputs):
        """The parent's ``seg`` term plus ``vote``: the L1 distance of every class's ``vote_codes`` (P, C, 3) to the
        teacher's, weighted by the teacher's score of that class (so background points hardly count)."""
        losses = super().distill_loss(outputs, teacher_outputs)
        weight = teacher_outputs['seg_logits'].detach().sigmoid().to(outputs['vote_codes'].dtype)  # (P, C)
        error = (outputs['vote_codes'] - teacher_outputs['vote_codes'].detach()).abs().mean(2)
        losses['vote'] = (error * weight).sum() / weight.sum().clamp(min=1)
        return losses
