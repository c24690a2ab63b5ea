"""Class-wise sigmoid point segmentation head (FSD's segmentation branch)."""
import torch
import torch.nn.functional as F
from torch import nn

from fsdlite.registry import MODELS

from ..layers.mlp import build_mlp
from ..layers.norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG


@MODELS.register_module()
class PointSegHead(nn.Module):
    """Per-point foreground logits, one sigmoid per class (background = every logit negative).

    ``shared MLP (Linear+norm+act per hidden width) -> Linear(num_classes)``.  Subclasses (e.g. a
    vote head adding centre offsets) extend :meth:`forward`, :meth:`loss` and :meth:`get_targets`
    through the ``outputs`` / ``targets`` dicts and reuse ``seg_feats``.

    Args:
        in_channels (int): C_in of the (P, C_in) point features.
        num_classes (int): C foreground classes; label C means background.
        hidden_channels (Sequence[int]): widths of the shared MLP.
        norm_cfg, act_cfg (dict | None): norm / activation of the shared MLP.
        loss_seg (dict): loss config, default ``SigmoidFocalLoss(gamma=3.0, alpha=0.8)`` (FSD), averaged
            over the number of foreground points (at least 1).
        score_thr (float | Sequence[float]): a point is labelled with its best class when that class's
            score reaches the threshold (one value or one per class), else background.
        ignore_index (int): label value excluded from the loss.
    """

    def __init__(self, in_channels, num_classes, hidden_channels=(128, 128), norm_cfg=DEFAULT_NORM_CFG,
                 act_cfg=DEFAULT_ACT_CFG, loss_seg=dict(type='SigmoidFocalLoss', gamma=3.0, alpha=0.8),
                 score_thr=0.5, ignore_index=-1):
        super().__init__()
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        self.num_classes = num_classes
        self.shared = build_mlp(in_channels, hidden_channels, norm_cfg, act_cfg)
        self.seg_feat_channels = self.shared[-1].out_channels if len(self.shared) else int(in_channels)
        self.cls_layer = nn.Linear(self.seg_feat_channels, num_classes)
        self.loss_seg = MODELS.build(dict(loss_seg))
        thr = [float(score_thr)] * num_classes if isinstance(score_thr, (int, float)) else [float(t) for t in score_thr]
        if len(thr) != num_classes or not all(0 <= t <= 1 for t in thr):
            raise ValueError(f'score_thr must be one value or {num_classes} values in [0, 1], got {score_thr!r}')
        self.register_buffer('score_thr', torch.tensor(thr), persistent=False)
        if ignore_index in range(num_classes + 1):
            raise ValueError(f'ignore_index must not be a class or the background label (0..{num_classes}), '
                             f'got {ignore_index!r}')
        self.ignore_index = int(ignore_index)

    def forward(self, point_feats):
        """(P, C_in) point features -> ``dict(seg_logits=(P, num_classes), seg_feats=(P, seg_feat_channels))``."""
        seg_feats = self.shared(point_feats)
        return dict(seg_logits=self.cls_layer(seg_feats), seg_feats=seg_feats)

    def get_targets(self, point_labels, **context):
        """Training targets of the P points: ``dict(labels=(P,) int64)``.

        ``context`` (points, batch, data_samples, ...) is unused here; subclasses derive more targets from it.
        """
        labels = point_labels.long()
        bad = (labels != self.ignore_index) & ((labels < 0) | (labels > self.num_classes))
        if bool(bad.any()):
            raise ValueError(f'point labels must be in [0, {self.num_classes}] ({self.num_classes} = background) or '
                             f'ignore_index={self.ignore_index}, got {int(labels[bad][0])}')
        return dict(labels=labels)

    def loss(self, outputs, targets):
        """Losses: ``dict(loss_seg=scalar)`` (focal loss averaged over foreground points)."""
        logits, labels = outputs['seg_logits'], targets['labels']
        valid = labels != self.ignore_index
        logits, labels = logits[valid], labels[valid]
        num_fg = (labels < self.num_classes).sum().clamp(min=1).to(logits.dtype)
        return dict(loss_seg=self.loss_seg(logits, labels, avg_factor=num_fg))

    def distill_loss(self, outputs, teacher_outputs):
        """Matching a teacher's scores (slim fine-tuning, :mod:`fsdlite.slim.distill`): ``dict(seg=scalar)``, the
        sigmoid cross-entropy of ``seg_logits`` (P, C) against the teacher's sigmoid scores (P, C), summed and
        divided by the teacher's foreground mass (the sum of its scores, at least 1) like the focal loss."""
        logits, target = outputs['seg_logits'], teacher_outputs['seg_logits'].detach().sigmoid()
        if logits.shape != target.shape:
            raise ValueError(f'{type(self).__name__}.distill_loss: seg_logits {tuple(logits.shape)} and the '
                             f"teacher's {tuple(target.shape)} differ")
        bce = F.binary_cross_entropy_with_logits(logits, target.to(logits.dtype), reduction='sum')
        return dict(seg=bce / target.sum().clamp(min=1).to(logits.dtype))

    def predict(self, outputs):
        """``dict(scores=(P, C) sigmoid scores, labels=(P,) int64 in [0, C])`` (C = background)."""
        scores = outputs['seg_logits'].sigmoid()
        if scores.shape[0] == 0:
            return dict(scores=scores, labels=torch.empty(0, dtype=torch.long, device=scores.device))
        best, cls = scores.max(1)
        fg = best >= self.score_thr.to(scores.device)[cls]
        return dict(scores=scores, labels=torch.where(fg, cls, torch.full_like(cls, self.num_classes)))


__all__ = ['PointSegHead']
