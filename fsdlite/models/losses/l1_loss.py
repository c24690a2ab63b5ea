"""L1 regression loss with element weights and an averaging factor (mmdet's call convention)."""
from torch import nn

from fsdlite.registry import MODELS

from .reduction import check_reduction, reduce_loss


@MODELS.register_module()
class L1Loss(nn.Module):
    """``loss_weight * reduce(weight * |pred - target|)``.

    Args:
        reduction (str): 'none', 'mean' (sum divided by ``avg_factor``, default the element count) or 'sum'.
        loss_weight (float): multiplier of the reduced loss.
    """

    def __init__(self, reduction='mean', loss_weight=1.0):
        super().__init__()
        self.reduction, self.loss_weight = check_reduction('L1Loss', reduction), float(loss_weight)

    def forward(self, pred, target, weight=None, avg_factor=None):
        """pred, target (N, ...) of one shape; weight broadcastable to it; returns a scalar (or (N, ...) for 'none')."""
        if pred.shape != target.shape:
            raise ValueError(f'L1Loss: pred {tuple(pred.shape)} and target {tuple(target.shape)} must have one shape')
        loss = (pred - target).abs()
        if weight is not None:
            loss = loss * weight.to(loss.dtype)
        return reduce_loss(loss, self.reduction, avg_factor, self.loss_weight)


__all__ = ['L1Loss']
