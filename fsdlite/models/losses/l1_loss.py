"""L1 regression loss with element weights and an averaging factor (mmdet's call convention)."""
from torch import nn

from fsdlite.registry import MODELS

REDUCTIONS = ('none', 'mean', 'sum')


@MODELS.register_module()
class L1Loss(nn.Module):
    """``loss_weight * reduce(weight * |pred - target|)``.

    Args:
        reduction (str): 'none', 'mean' (sum divided by ``avg_factor``, default the element count) or 'sum'.
        loss_weight (float): multiplier of the reduced loss.
    """

    def __init__(self, reduction='mean', loss_weight=1.0):
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f'L1Loss: reduction must be one of {REDUCTIONS}, got {reduction!r}')
        self.reduction, self.loss_weight = reduction, float(loss_weight)

    def forward(self, pred, target, weight=None, avg_factor=None):
        """pred, target (N, ...) of one shape; weight broadcastable to it; returns a scalar (or (N, ...) for 'none')."""
        if pred.shape != target.shape:
            raise ValueError(f'L1Loss: pred {tuple(pred.shape)} and target {tuple(target.shape)} must have one shape')
        loss = (pred - target).abs()
        if weight is not None:
            loss = loss * weight.to(loss.dtype)
        if self.reduction == 'none':
            return self.loss_weight * loss
        total = loss.sum()
        if self.reduction == 'mean':
            total = total / (avg_factor if avg_factor is not None else max(loss.numel(), 1))
        return self.loss_weight * total


__all__ = ['L1Loss']
