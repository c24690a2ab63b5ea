"""Foreground sampling: which points (per class) go on to grouping, and where they vote.

Per sample and class ``c`` a point is kept when its class score exceeds ``score_thresholds[c]`` and
it is among the ``max_per_class[c]`` best of its (sample, class); in warm-up (``mode='topk'``,
see :class:`fsdlite.engine.fsd_hooks.FSDWarmupHook`) the ``warmup_topk[c]`` best are kept
regardless of score.  A point may be kept for several classes.  Points above the threshold but
beyond the budget are counted (``num_over_budget``), never dropped silently.
"""
from typing import NamedTuple, Optional

import torch

from fsdlite.structures.bounds import check_bound
from fsdlite.utils.constants import const

from ...registry import TASK_UTILS
from ..layers.static_ops import gather_rows, masked_topk
from .coders import decode_vote
from .indexing import mask_to_index, mask_to_padded_index


class ForegroundPoints(NamedTuple):
    """Selected (point, class) pairs, point-major: ``point_index`` (P,), ``class_id`` (P,), ``batch`` (P,),
    ``centre`` (P, 3) voted centres (clamped into the point range, no gradient), ``score`` (P,), and
    ``num_over_budget`` (0-d int64) above-threshold candidates cut by the budget.

    Fixed shapes (the sampler given ``bounds``): P slots, the first ``num_valid`` () used, ``point_index`` N (dump)
    and ``class_id`` / ``batch`` 0 in the others; ``dropped`` (C,) selections beyond the per-class bounds.
    """

    point_index: torch.Tensor
    class_id: torch.Tensor
    batch: torch.Tensor
    centre: torch.Tensor
    score: torch.Tensor
    num_over_budget: torch.Tensor
    num_valid: Optional[torch.Tensor] = None
    dropped: Optional[torch.Tensor] = None


def _per_class(name, values, num_classes, cast):
    values = list(values) if isinstance(values, (list, tuple)) else [values] * num_classes
    if len(values) != num_classes:
        raise ValueError(f'ForegroundSampler: {name} needs one value per class ({num_classes}), got {values}')
    return [cast(v) for v in values]


@TASK_UTILS.register_module()
class ForegroundSampler:
    """Score threshold with a per-(sample, class) top-k budget.

    Args:
        num_classes (int): C.
        score_thresholds (float | sequence): per-class score threshold.
        max_per_class (int | sequence): per-sample budget of points per class after thresholding.
        warmup_topk (int | sequence): per-sample points per class kept in warm-up (``mode='topk'``).
        point_range (sequence): [x0, y0, z0, x1, y1, z1]; voted centres are clamped inside it.
    """

    def __init__(self, num_classes, score_thresholds=0.3, max_per_class=2048, warmup_topk=256,
                 point_range=(0, -40, -3, 70.4, 40, 1)):
        self.num_classes = int(num_classes)
        self.score_thresholds = _per_class('score_thresholds', score_thresholds, self.num_classes, float)
        self.max_per_class = _per_class('max_per_class', max_per_class, self.num_classes, int)
        self.warmup_topk = _per_class('warmup_topk', warmup_topk, self.num_classes, int)
        if any(k <= 0 for k in self.max_per_class + self.warmup_topk):
            raise ValueError(f'ForegroundSampler: budgets must be > 0, got max_per_class={self.max_per_class}, '
                             f'warmup_topk={self.warmup_topk}')
        if len(point_range) != 6 or not all(point_range[i] < point_range[i + 3] for i in range(3)):
            raise ValueError(f'ForegroundSampler: point_range must be [x0, y0, z0, x1, y1, z1] with min < max, '
                             f'got {point_range}')
        self.point_range = [float(v) for v in point_range]

    def __call__(self, scores, vote_codes, xyz, batch, batch_size, mode='threshold', threshold_offset=0.0,
                 valid=None, bounds=None, strict=None):
        """Select foreground (point, class) pairs: per class and sample, the ``budget`` best points above the
        threshold (``masked_topk`` over a (B, N) layout, no loop over samples), listed point-major.

        Args:
            scores (Tensor): (N, C) class-wise sigmoid scores.
            vote_codes (Tensor): (N, C, 3) vote predictions (sign-sqrt coded offsets).
            xyz (Tensor): (N, 3) point coordinates.
            batch (Tensor): (N,) sample ids in [0, batch_size).
            batch_size (int): B.
            mode (str): 'threshold' (score threshold + ``max_per_class``) or 'topk' (warm-up: ``warmup_topk``,
                whatever the score).
            threshold_offset (float): subtracted from the thresholds (the warm-up hook's buffer).
            valid (Tensor, optional): (N,) bool real points (padded inputs).
            bounds (Sequence[int], optional): fixed shapes: per class, the bound on selected points per sample
                (``max_fg_points``; the budget is the smaller of it and the class's); the result is padded to
                ``B * sum(budgets)`` slots.
            strict (bool, optional): with ``bounds``, raise on overflow (default: eager mode; exporting keeps the
                best and counts the rest in ``dropped``).
        Returns:
            ForegroundPoints
        """
        if mode not in ('threshold', 'topk'):
            raise ValueError(f"ForegroundSampler: mode must be 'threshold' or 'topk', got {mode!r}")
        n, c = scores.shape
        if c != self.num_classes or vote_codes.shape != (n, c, 3):
            raise ValueError(f'ForegroundSampler: expected scores (N, {self.num_classes}) and vote_codes (N, C, 3), '
                             f'got {tuple(scores.shape)} and {tuple(vote_codes.shape)}')
        if bounds is not None and len(bounds) != c:
            raise ValueError(f'ForegroundSampler: bounds needs one value per class ({c}), got {bounds}')
        detached = scores.detach()
        in_sample = batch[None, :] == torch.arange(batch_size, device=batch.device)[:, None]     # (B, N)
        if valid is not None:
            in_sample = in_sample & valid[None, :]
        if mode == 'topk':
            above, budgets = None, self.warmup_topk
        else:
            thr = const(self.score_thresholds, detached.dtype, scores.device) - float(threshold_offset)
            above, budgets = detached > thr, self.max_per_class
        keep = torch.zeros(n * c + 1, dtype=torch.long, device=scores.device)
        over_budget = torch.zeros((), dtype=torch.long, device=scores.device)
        dropped, slots = [], 0
        for k in range(c):  # classes (a constant of the model), never samples
            cand = in_sample if above is None else in_sample & above[:, k]
            budget, count = budgets[k], cand.long().sum(1)                                     # (B,)
            if above is not None:
                over_budget = over_budget + (count - budget).clamp(min=0).sum()
            if bounds is not None:
                dropped.append(check_bound(count.clamp(max=budget).max(), bounds[k], f'max_fg_points[{k}]',
                                           strict=strict))
                budget = min(budget, int(bounds[k]))
            slots += budget
            top = masked_topk(detached[:, k].expand(batch_size, n), budget, valid=cand).indices
            flat = torch.where(top < n, top * c + k, torch.full_like(top, n * c))
            keep = keep.scatter(0, flat.reshape(-1), torch.ones_like(flat.reshape(-1)))
        selected = keep[:n * c] > 0
        if bounds is None:
            sel, num = mask_to_index(selected), None
        else:
            sel, num, _ = mask_to_padded_index(selected, batch_size * slots)
        point_index = torch.where(sel < n * c, sel // c, torch.full_like(sel, n))
        codes = gather_rows(vote_codes.reshape(n * c, 3), sel)
        centre = self.voted_centre(gather_rows(xyz, point_index), codes)
        return ForegroundPoints(point_index, sel % c, gather_rows(batch, point_index), centre,
                                gather_rows(scores.reshape(n * c), sel), over_budget, num,
                                None if bounds is None else torch.stack(dropped))

    def voted_centre(self, xyz, codes):
        """Voted centres (P, 3) of points ``xyz`` (P, 3) with vote codes (P, 3), clamped into the point range."""
        offsets = decode_vote(codes.detach())  # votes learn from the vote loss only
        low = const([float(v) for v in self.point_range[:3]], xyz.dtype, xyz.device)
        high = const([float(v) for v in self.point_range[3:]], xyz.dtype, xyz.device)
        # keep centres strictly inside the range so every voxelization of them includes them
        return torch.maximum(torch.minimum(xyz + offsets, high - 1e-3), low)
