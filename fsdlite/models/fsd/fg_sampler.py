"""Foreground sampling: which points (per class) go on to grouping, and where they vote.

Per sample and class ``c`` a point is kept when its class score exceeds ``score_thresholds[c]`` and
it is among the ``max_per_class[c]`` best of its (sample, class); in warm-up (``mode='topk'``,
see :class:`fsdlite.engine.fsd_hooks.FSDWarmupHook`) the ``warmup_topk[c]`` best are kept
regardless of score.  A point may be kept for several classes.  Points above the threshold but
beyond the budget are counted (``num_over_budget``), never dropped silently.
"""
from typing import NamedTuple

import torch

from ...registry import TASK_UTILS
from .coders import decode_vote
from .indexing import mask_to_index, segment_rank


class ForegroundPoints(NamedTuple):
    """Selected (point, class) pairs: ``point_index`` (P,), ``class_id`` (P,), ``batch`` (P,),
    ``centre`` (P, 3) voted centres (clamped into the point range, no gradient), ``score`` (P,),
    and ``num_over_budget`` (0-d int64) above-threshold candidates cut by the budget."""

    point_index: torch.Tensor
    class_id: torch.Tensor
    batch: torch.Tensor
    centre: torch.Tensor
    score: torch.Tensor
    num_over_budget: torch.Tensor


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

    def __call__(self, scores, vote_codes, xyz, batch, batch_size, mode='threshold', threshold_offset=0.0):
        """Select foreground (point, class) pairs.

        Args:
            scores (Tensor): (N, C) class-wise sigmoid scores.
            vote_codes (Tensor): (N, C, 3) vote predictions (sign-sqrt coded offsets).
            xyz (Tensor): (N, 3) point coordinates.
            batch (Tensor): (N,) sample ids in [0, batch_size).
            batch_size (int): B.
            mode (str): 'threshold' (score threshold + budget) or 'topk' (warm-up: budget only).
            threshold_offset (float): subtracted from the thresholds (the warm-up hook's buffer).
        Returns:
            ForegroundPoints
        """
        if mode not in ('threshold', 'topk'):
            raise ValueError(f"ForegroundSampler: mode must be 'threshold' or 'topk', got {mode!r}")
        n, c = scores.shape
        if c != self.num_classes or vote_codes.shape != (n, c, 3):
            raise ValueError(f'ForegroundSampler: expected scores (N, {self.num_classes}) and vote_codes (N, C, 3), '
                             f'got {tuple(scores.shape)} and {tuple(vote_codes.shape)}')
        device = scores.device
        flat = scores.detach().reshape(-1)
        cls = torch.arange(c, device=device).repeat(n)
        key = batch.repeat_interleave(c) * c + cls
        rank = segment_rank(key, flat, batch_size * c)
        budgets = self.warmup_topk if mode == 'topk' else self.max_per_class
        keep = rank < torch.tensor(budgets, device=device)[cls]
        num_over_budget = torch.zeros((), dtype=torch.int64, device=device)
        if mode == 'threshold':
            thr = torch.tensor(self.score_thresholds, dtype=flat.dtype, device=device) - threshold_offset
            above = flat > thr[cls]
            num_over_budget = (above & ~keep).sum()
            keep = keep & above
        sel = mask_to_index(keep)
        point_index, class_id = sel // c, sel % c
        offsets = decode_vote(vote_codes[point_index, class_id].detach())  # votes learn from the vote loss only
        low = torch.tensor(self.point_range[:3], dtype=xyz.dtype, device=device)
        high = torch.tensor(self.point_range[3:], dtype=xyz.dtype, device=device)
        # keep centres strictly inside the range so every voxelization of them includes them
        centre = torch.maximum(torch.minimum(xyz[point_index] + offsets, high - 1e-3), low)
        return ForegroundPoints(point_index, class_id, batch[point_index], centre,
                                scores[point_index, class_id], num_over_budget)
