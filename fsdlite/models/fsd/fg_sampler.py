"""Foreground sampling: which points (per class) go on to grouping, and where they vote.

Per sample and class ``c`` a point is kept when its class score exceeds ``score_thresholds[c]`` and
it is among the ``max_per_class[c]`` best of its (sample, class); in warm-up (``mode='topk'``,
see :class:`fsdlite.engine.fsd_hooks.FSDWarmupHook`) the ``warmup_topk[c]`` best are kept
regardless of score.  A point may be kept for several classes.  Points above the threshold but
beyond the budget are counted (``num_over_budget``), never dropped silently.
"""
from typing import NamedTuple

import torch

from fsdlite.structures.bounds import check_bound
from fsdlite.utils.constants import const

from ...registry import TASK_UTILS
from ..layers.static_ops import gather_rows, masked_topk
from .coders import decode_vote
from .indexing import mask_to_index, mask_to_padded_index, segment_count, segment_rank


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


class PaddedForeground(NamedTuple):
    """Fixed-shape :class:`ForegroundPoints` (P slots, the first ``num_valid`` used, point-major order):
    ``point_index`` (P,) (N = dump), ``class_id``, ``batch`` (P,) (0 in padding), ``centre`` (P, 3), ``score`` (P,),
    ``num_valid`` (), ``num_over_budget`` () and ``dropped`` (C,) selections beyond the per-class bounds."""

    point_index: torch.Tensor
    class_id: torch.Tensor
    batch: torch.Tensor
    centre: torch.Tensor
    score: torch.Tensor
    num_valid: torch.Tensor
    num_over_budget: torch.Tensor
    dropped: torch.Tensor


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
        budgets = torch.tensor(self.warmup_topk if mode == 'topk' else self.max_per_class, device=device)
        if mode == 'threshold':
            # Rank only the pairs above their threshold: they outscore every pair below it, so their rank among
            # themselves is their rank among all pairs of the same (sample, class) (and the sort is much smaller).
            thr = torch.tensor(self.score_thresholds, dtype=flat.dtype, device=device) - threshold_offset
            cand = mask_to_index((scores.detach() > thr).reshape(-1))
        else:
            cand = torch.arange(n * c, device=device)
        cand_cls = cand % c
        segment = batch.index_select(0, cand // c) * c + cand_cls
        num_over_budget = torch.zeros((), dtype=torch.int64, device=device)
        counts, fits = None, False  # candidates per (sample, class), reused by the ranking; all within budget?
        if mode == 'threshold':
            fits = segment.numel() <= min(self.max_per_class)  # fewer candidates than any budget: no count needed
            if not fits:
                counts = segment_count(segment, batch_size * c)
                fits = bool((counts.view(batch_size, c) <= budgets).all())
        if fits:
            sel = cand  # every candidate fits its budget: nothing to rank
        else:
            keep = (segment_rank(segment, flat.index_select(0, cand), batch_size * c, counts)
                    < budgets.index_select(0, cand_cls))
            if mode == 'threshold':
                num_over_budget = (~keep).sum()
            sel = cand[keep]
        point_index, class_id = sel // c, sel % c  # sel indexes the flattened (N, C) pairs
        centre = self.voted_centre(xyz.index_select(0, point_index), vote_codes.reshape(n * c, 3).index_select(0, sel))
        return ForegroundPoints(point_index, class_id, batch.index_select(0, point_index), centre,
                                scores.reshape(n * c).index_select(0, sel), num_over_budget)

    def voted_centre(self, xyz, codes):
        """Voted centres (P, 3) of points ``xyz`` (P, 3) with vote codes (P, 3), clamped into the point range."""
        offsets = decode_vote(codes.detach())  # votes learn from the vote loss only
        low = const([float(v) for v in self.point_range[:3]], xyz.dtype, xyz.device)
        high = const([float(v) for v in self.point_range[3:]], xyz.dtype, xyz.device)
        # keep centres strictly inside the range so every voxelization of them includes them
        return torch.maximum(torch.minimum(xyz + offsets, high - 1e-3), low)

    def select_padded(self, scores, vote_codes, xyz, batch, valid, batch_size, bounds, names=None, strict=None):
        """Fixed-shape twin of ``__call__`` in threshold mode (inference).

        Per class ``c`` and sample, the best ``min(max_per_class[c], bounds[c])`` points above the threshold
        are kept (``masked_topk`` over a (B, N) layout: no loop over samples); the selected (point, class)
        pairs are listed point-major, as in the dynamic mode.

        Args:
            scores, vote_codes, xyz, batch: as ``__call__``, padded to N rows.
            valid (Tensor): (N,) bool real points.
            batch_size (int): B.
            bounds (Sequence[int]): per class, the bound on selected points per sample (``max_fg_points``).
            names (Sequence[str], optional): bound names for overflow errors (default ``max_fg_points[c]``).
            strict (bool, optional): raise on overflow (default: eager mode; exporting keeps the best).
        Returns:
            PaddedForeground
        """
        n, c = scores.shape
        if len(bounds) != c:
            raise ValueError(f'ForegroundSampler.select_padded: bounds needs one value per class ({c}), got {bounds}')
        names = names or [f'max_fg_points[{k}]' for k in range(c)]
        detached = scores.detach()
        thr = const([float(v) for v in self.score_thresholds], detached.dtype, scores.device)
        above = (detached > thr) & valid[:, None]
        in_sample = batch[None, :] == torch.arange(batch_size, device=batch.device)[:, None]     # (B, N)
        keep = torch.zeros(n * c + 1, dtype=torch.long, device=scores.device)
        over_budget, dropped, budgets = torch.zeros((), dtype=torch.long, device=scores.device), [], []
        for k in range(c):  # classes (a constant of the model), never samples
            cand = in_sample & above[:, k]
            count = cand.long().sum(1)                                                      # (B,)
            over_budget = over_budget + (count - self.max_per_class[k]).clamp(min=0).sum()
            needed = count.clamp(max=self.max_per_class[k]).max()
            dropped.append(check_bound(needed, bounds[k], names[k], strict=strict))
            budgets.append(min(self.max_per_class[k], int(bounds[k])))
            top = masked_topk(detached[:, k].expand(batch_size, n), budgets[-1], valid=cand).indices
            flat = torch.where(top < n, top * c + k, torch.full_like(top, n * c))
            keep = keep.scatter(0, flat.reshape(-1), torch.ones_like(flat.reshape(-1)))
        sel, num, _ = mask_to_padded_index(keep[:n * c] > 0, batch_size * sum(budgets))
        point_index = torch.where(sel < n * c, sel // c, torch.full_like(sel, n))
        class_id = sel % c
        codes = gather_rows(vote_codes.reshape(n * c, 3), sel)
        centre = self.voted_centre(gather_rows(xyz, point_index), codes)
        return PaddedForeground(point_index, class_id, gather_rows(batch, point_index), centre,
                                gather_rows(scores.reshape(n * c), sel), num, over_budget, torch.stack(dropped))
