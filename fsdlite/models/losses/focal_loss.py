"""Sigmoid focal loss (Lin et al., RetinaNet) for class-wise binary logits."""
import math

import torch
import torch.nn.functional as F
from torch import nn

from fsdlite.registry import MODELS

from .reduction import check_reduction, reduce_loss


def sigmoid_focal_loss(logits, targets, gamma=2.0, alpha=0.25):
    """Element-wise focal loss ``alpha_t * (1 - p_t) ** gamma * BCE(logits, targets)``.

    Args:
        logits (Tensor): (N, C) raw scores.
        targets (Tensor): (N, C) binary (0/1) targets, same dtype as ``logits``.
        gamma (float): focusing parameter (>= 0).
        alpha (float): weight of positives in [0, 1] (negatives get ``1 - alpha``); negative disables it.
    Returns:
        Tensor: (N, C) losses.
    """
    prob = logits.sigmoid()
    p_t = prob * targets + (1 - prob) * (1 - targets)
    loss = F.binary_cross_entropy_with_logits(logits, targets, reduction='none') * (1 - p_t).pow(gamma)
    if alpha >= 0:
        loss = loss * (alpha * targets + (1 - alpha) * (1 - targets))
    return loss


def labels_to_one_hot(labels, num_classes, dtype):
    """(N,) int labels in ``[0, C]`` (C = background) -> (N, C) one-hot rows (background = all zeros)."""
    one_hot = torch.zeros(labels.shape[0], num_classes + 1, dtype=dtype, device=labels.device)
    one_hot.scatter_(1, labels.view(-1, 1), 1)
    return one_hot[:, :num_classes]


@MODELS.register_module()
class SigmoidFocalLoss(nn.Module):
    """Focal loss over C independent sigmoid logits.

    Args:
        gamma (float): focusing parameter (FSD uses 3.0).
        alpha (float): positive weight (FSD uses 0.8).
        reduction (str): 'none', 'mean' or 'sum'.
        loss_weight (float): multiplier of the reduced loss.
    """

    def __init__(self, gamma=2.0, alpha=0.25, reduction='mean', loss_weight=1.0):
        super().__init__()
        if not float(gamma) >= 0:
            raise ValueError(f'gamma must be >= 0, got {gamma!r}')
        if not math.isfinite(float(alpha)) or float(alpha) > 1:
            raise ValueError(f'alpha must be in [0, 1] (or negative to disable), got {alpha!r}')
        self.gamma, self.alpha = float(gamma), float(alpha)
        self.reduction, self.loss_weight = check_reduction('SigmoidFocalLoss', reduction), float(loss_weight)

    def forward(self, logits, targets, weight=None, avg_factor=None):
        """Compute the loss.

        Args:
            logits (Tensor): (N, C) raw scores.
            targets (Tensor): (N,) int64 labels in ``[0, C]`` (C = background) or (N, C) binary targets.
            weight (Tensor | None): (N,) or (N, C) element weights.
            avg_factor (float | Tensor | None): divisor of the summed loss for 'mean' (default: number of
                elements).
        Returns:
            Tensor: scalar for 'mean'/'sum', (N, C) for 'none'.
        """
        if logits.dim() != 2:
            raise ValueError(f'logits must be (N, C), got shape {tuple(logits.shape)}')
        num_classes = logits.shape[1]
        if targets.dim() == 1:
            if targets.shape[0] != logits.shape[0]:
                raise ValueError(f'targets has {targets.shape[0]} labels for {logits.shape[0]} logits')
            if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) > num_classes):
                raise ValueError(f'label targets must lie in [0, {num_classes}] ({num_classes} = background), got '
                                 f'values in [{int(targets.min())}, {int(targets.max())}]')
            targets = labels_to_one_hot(targets, num_classes, logits.dtype)
        elif targets.shape != logits.shape:
            raise ValueError(f'targets must be (N,) labels or (N, C) like logits {tuple(logits.shape)}, '
                             f'got {tuple(targets.shape)}')
        loss = sigmoid_focal_loss(logits, targets.to(logits.dtype), self.gamma, self.alpha)
        if weight is not None:
            loss = loss * (weight.view(-1, 1) if weight.dim() == 1 else weight).to(loss.dtype)
        return reduce_loss(loss, self.reduction, avg_factor, self.loss_weight)


__all__ = ['SigmoidFocalLoss', 'sigmoid_focal_loss', 'labels_to_one_hot']
