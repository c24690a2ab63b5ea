"""The reduction shared by the losses (mmdet's call convention: ``reduction``, ``avg_factor``, ``loss_weight``)."""

REDUCTIONS = ('none', 'mean', 'sum')


def check_reduction(owner, reduction):
    """Return ``reduction``; raises a ValueError naming ``owner`` unless it is one of :data:`REDUCTIONS`."""
    if reduction not in REDUCTIONS:
        raise ValueError(f'{owner}: reduction must be one of {REDUCTIONS}, got {reduction!r}')
    return reduction


def reduce_loss(loss, reduction, avg_factor=None, loss_weight=1.0):
    """``loss_weight`` times the element losses (``'none'``), their sum (``'sum'``) or their sum divided by
    ``avg_factor`` (``'mean'``; default: the element count, at least 1).

    Args:
        loss (Tensor): (N, ...) weighted element losses.
        reduction (str): one of :data:`REDUCTIONS`.
        avg_factor (float | Tensor | None): divisor for 'mean'.
        loss_weight (float): multiplier.
    Returns:
        Tensor: scalar, or (N, ...) for 'none'.
    """
    if reduction == 'none':
        return loss_weight * loss
    total = loss.sum()
    if reduction == 'mean':
        total = total / (avg_factor if avg_factor is not None else max(loss.numel(), 1))
    return loss_weight * total


__all__ = ['REDUCTIONS', 'check_reduction', 'reduce_loss']
