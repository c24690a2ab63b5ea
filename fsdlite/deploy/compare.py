"""Differences between deployed (ONNX Runtime) and PyTorch outputs, and matching of final predictions."""
from typing import NamedTuple

import torch


class OutputDiff(NamedTuple):
    """Difference of one output over its compared (valid) part.

    ``name``; ``compared`` number of elements compared; ``max_abs`` / ``max_rel`` (relative to
    ``max(|reference|, 1e-6)``); ``tolerance`` the abs tolerance this output is held to (None: reported only);
    ``note`` how rows were aligned; ``explained`` why a difference beyond the tolerance is not an export error
    (decisions that flipped on near-ties, :mod:`fsdlite.deploy.decisions`; '' when not explained).
    """
    name: str
    compared: int
    max_abs: float
    max_rel: float
    tolerance: object = None
    note: str = ''
    explained: str = ''

    @property
    def ok(self):
        """True when no tolerance is set, ``max_abs <= tolerance``, or the difference is explained."""
        return self.tolerance is None or self.max_abs <= self.tolerance or bool(self.explained)


def tensor_diff(name, value, reference, tolerance=None, note=''):
    """:class:`OutputDiff` of two same-shape tensors (compared in float64; integer tensors exactly)."""
    value, reference = torch.as_tensor(value), torch.as_tensor(reference)
    if value.shape != reference.shape:
        raise ValueError(f'{name}: deployed shape {tuple(value.shape)} differs from PyTorch {tuple(reference.shape)}')
    if value.numel() == 0:
        return OutputDiff(name, 0, 0.0, 0.0, tolerance, note)
    a, b = value.double(), reference.double()
    err = (a - b).abs()
    both_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    err = torch.where(both_inf, torch.zeros_like(err), err)
    err = torch.where(torch.isnan(a) & torch.isnan(b), torch.zeros_like(err), err)
    err = torch.nan_to_num(err, nan=float('inf'))
    rel = err / b.abs().clamp(min=1e-6)
    return OutputDiff(name, int(a.numel()), float(err.max()), float(rel.max()), tolerance, note)


def matched_rows_diff(name, rows, reference, key=None, tolerance=None, chunk=1024):
    """Largest distance from any row to its closest row of the other set (both directions), for row sets whose
    order may differ on near-ties (e.g. boxes ranked by nearly equal scores).

    Args:
        rows, reference (Tensor): (M, D) float rows (same M).
        key (Tensor pair, optional): (M,) integer keys per side (e.g. ``batch * C + label``); rows only match rows
            with the same key.
        chunk (int): rows per step (bounds the (chunk, M) distance buffer).
    Returns:
        OutputDiff (``max_rel`` relative to the matched reference row).
    """
    rows, reference = rows.double(), reference.double()
    if rows.shape != reference.shape:
        raise ValueError(f'{name}: deployed rows {tuple(rows.shape)} vs PyTorch {tuple(reference.shape)}')
    if rows.shape[0] == 0:
        return OutputDiff(name, 0, 0.0, 0.0, tolerance, 'rows matched by nearest neighbour')
    keys = key if key is not None else (torch.zeros(rows.shape[0], dtype=torch.long),) * 2
    worst, rel = 0.0, 0.0
    for a, b, ka, kb in ((rows, reference, keys[0], keys[1]), (reference, rows, keys[1], keys[0])):
        for start in range(0, a.shape[0], chunk):   # (chunk, M) distances at a time
            dist = (a[start:start + chunk, None, :] - b[None, :, :]).abs().amax(-1)
            dist = torch.where(ka[start:start + chunk, None] == kb[None, :], dist, torch.full_like(dist, float('inf')))
            best = dist.min(1)
            worst = max(worst, float(best.values.max()))
            scale = b[best.indices].abs().amax(-1).clamp(min=1e-6)
            rel = max(rel, float((best.values / scale).max()))
    return OutputDiff(name, int(rows.numel()), worst, rel, tolerance, 'rows matched by nearest neighbour')


class Match(NamedTuple):
    """Whether two sets of final predictions agree: ``same``; ``detail`` human-readable counts/differences."""
    same: bool
    detail: str


def match_detections(deployed, reference, atol=1e-4):
    """Same boxes after NMS: per sample the same number of boxes, labels, and boxes/scores within ``atol``.

    Args:
        deployed, reference (list[Det3DDataSample]): with ``pred_instances_3d`` (``bboxes_3d`` (D, 7),
            ``scores_3d`` (D,), ``labels_3d`` (D,)).
    Returns:
        Match
    """
    counts, worst, same = [], 0.0, len(deployed) == len(reference)
    for a, b in zip(deployed, reference):
        a, b = a.pred_instances_3d, b.pred_instances_3d
        counts.append(f'{a.bboxes_3d.shape[0]}/{b.bboxes_3d.shape[0]}')
        if a.bboxes_3d.shape != b.bboxes_3d.shape:
            same = False
            continue
        rows_a = torch.cat([a.bboxes_3d, a.scores_3d[:, None]], 1)
        rows_b = torch.cat([b.bboxes_3d, b.scores_3d[:, None]], 1)
        diff = matched_rows_diff('detections', rows_a, rows_b, key=(a.labels_3d, b.labels_3d))
        worst = max(worst, diff.max_abs)
        same &= diff.max_abs <= atol
    return Match(same, f'boxes deployed/PyTorch per sample {counts}, max box/score diff {worst:.2e} (atol {atol:g})')


def match_point_labels(deployed, reference, field='pts_semantic_mask', score_field='pts_scores', atol=1e-4):
    """Same per-point (or per-voxel) labels; scores within ``atol``.

    Args:
        deployed, reference (list[Det3DDataSample]): with ``pred_pts_seg.<field>`` (N,) and optionally
            ``pred_pts_seg.<score_field>`` (N, C).
    Returns:
        Match
    """
    total = agree = 0
    worst, same = 0.0, len(deployed) == len(reference)
    for a, b in zip(deployed, reference):
        la, lb = getattr(a.pred_pts_seg, field), getattr(b.pred_pts_seg, field)
        if la.shape != lb.shape:
            same = False
            continue
        total += la.numel()
        agree += int((la == lb).sum())
        if score_field in a.pred_pts_seg and score_field in b.pred_pts_seg:
            worst = max(worst, tensor_diff(score_field, getattr(a.pred_pts_seg, score_field),
                                           getattr(b.pred_pts_seg, score_field)).max_abs)
    same &= agree == total and worst <= atol
    return Match(same, f'{agree}/{total} labels equal, max score diff {worst:.2e} (atol {atol:g})')


def match_class_labels(deployed, reference, atol=1e-4):
    """Same ``pred_label`` per sample and ``pred_scores`` (classes,) within ``atol``.

    Args:
        deployed, reference (list[Det3DDataSample]): with ``pred_label`` () and ``pred_scores`` (C,).
    Returns:
        Match
    """
    same = len(deployed) == len(reference)
    agree, worst = 0, 0.0
    for a, b in zip(deployed, reference):
        agree += int(int(a.pred_label) == int(b.pred_label))
        worst = max(worst, tensor_diff('pred_scores', a.pred_scores, b.pred_scores).max_abs)
    same &= agree == len(reference) and worst <= atol
    return Match(same, f'{agree}/{len(reference)} labels equal, max score diff {worst:.2e} (atol {atol:g})')


__all__ = ['OutputDiff', 'tensor_diff', 'matched_rows_diff', 'Match', 'match_detections', 'match_point_labels',
           'match_class_labels']
