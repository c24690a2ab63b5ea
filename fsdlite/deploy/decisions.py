"""Explain differences between deployed and PyTorch results by the discrete decisions that flipped on near-ties.

ONNX Runtime and PyTorch compute the same graph up to float rounding (~1e-6).  Where a model takes a discrete
decision on a computed quantity -- a score against a threshold, a rank against a budget, an IoU against the NMS
threshold -- a quantity that sits on its threshold can fall on either side, and everything downstream of the
decision differs (a box more or less, other instances).  Such a difference is not an export error when the
deciding quantity was within a small tolerance of its threshold.

Each deploy adapter declares its decisions (:meth:`~fsdlite.deploy.adapter.DeployAdapter.decision_checks`) as a
:class:`DecisionChecks`:

* **output decisions** (:class:`SelectionDecision`): per-item selections recomputed from a graph output on both
  sides (e.g. foreground points: score above a per-class threshold and within a per-class budget); every item
  whose selection differs is a :class:`Flip` with its margin to the threshold or the budget's cut-off score, and
  the outputs the decision feeds (``downstream``) may differ when every flip is a near-tie;
* **detection decisions** (:class:`ScoreThreshold`, :class:`NmsOverlap`, :class:`RankCutoff`): every detection
  present on one side only (matched per sample and label by nearest neighbour, :func:`pair_detections`) must have
  a deciding quantity within the tolerance of its threshold.

:func:`explain_detections` and :func:`explain_outputs` return an :class:`Explanation`: the flips that explain the
differences, and what stays unexplained (a real mismatch).
"""
from typing import NamedTuple

import torch

from fsdlite.ops import boxes_iou_bev

#: default tolerance on a deciding score / IoU: how close to its threshold a quantity must sit to flip by rounding
DECISION_TOLERANCE = 1e-5


class Flip(NamedTuple):
    """One discrete decision that may have flipped: ``item`` (what was decided, in words), ``quantity`` (its name),
    ``value`` (the deciding quantity, in the reference where known), ``decision`` (the threshold's name),
    ``threshold`` and ``tol`` (how close counts as a near-tie)."""
    item: str
    quantity: str
    value: float
    decision: str
    threshold: float
    tol: float = DECISION_TOLERANCE

    @property
    def margin(self):
        """``|value - threshold|``."""
        return abs(float(self.value) - float(self.threshold))

    @property
    def explained(self):
        """True when the quantity sat within ``tol`` of its threshold (a near-tie)."""
        return self.margin <= self.tol

    def describe(self):
        """e.g. ``'box ...: score 0.10000003 vs score_thr 0.1 (|margin| 3.0e-08 <= tol 1e-05)'``."""
        rel = '<=' if self.explained else '>'
        return (f'{self.item}: {self.quantity} {self.value:.8g} vs {self.decision} {self.threshold:.8g} '
                f'(|margin| {self.margin:.1e} {rel} tol {self.tol:g})')


class Explanation(NamedTuple):
    """``flips`` the near-tie decisions (list of :class:`Flip`) that explain the differences; ``unexplained``
    (list of str) the differences no near-tie explains."""
    flips: list
    unexplained: list

    @property
    def ok(self):
        """True when every difference is explained."""
        return not self.unexplained

    def merged(self, other):
        """Both explanations together."""
        return Explanation(self.flips + other.flips, self.unexplained + other.unexplained)

    def lines(self, limit=5):
        """Printable lines: a summary per decision, up to ``limit`` flips each, then the unexplained items."""
        out, groups = [], {}
        for flip in self.flips:
            groups.setdefault(flip.decision, []).append(flip)
        for decision, flips in groups.items():
            worst = max(f.margin for f in flips)
            out.append(f'{len(flips)} flipped at {decision} (largest |margin| {worst:.1e} <= tol {flips[0].tol:g})')
            out += [f'  {f.describe()}' for f in flips[:limit]]
            if len(flips) > limit:
                out.append(f'  ... {len(flips) - limit} more')
        out += [f'UNEXPLAINED: {u}' for u in self.unexplained]
        return out


class DecisionChecks(NamedTuple):
    """What an adapter declares: ``outputs`` (:class:`SelectionDecision` list) and ``detections`` (detection
    decision list: :class:`ScoreThreshold`, :class:`NmsOverlap`, :class:`RankCutoff`)."""
    outputs: tuple = ()
    detections: tuple = ()


# ---------------------------------------------------------------------------------------------------- detections
class Detection(NamedTuple):
    """One box of a result set: ``side`` ('deployed' / 'PyTorch'), ``sample``, ``label``, ``box`` (7,) float64
    tensor, ``score``."""
    side: str
    sample: int
    label: int
    box: torch.Tensor
    score: float

    def describe(self):
        """e.g. ``'deployed box (sample 0, label 1) at x 12.30 y -4.10'``."""
        return (f'{self.side} box (sample {self.sample}, label {self.label}) at x {float(self.box[0]):.2f} '
                f'y {float(self.box[1]):.2f}')


def detections_of(boxes, scores, labels, samples, side):
    """list of :class:`Detection` from (D, 7) boxes, (D,) scores, (D,) labels and (D,) sample ids."""
    boxes = boxes.detach().double().cpu()
    return [Detection(side, int(s), int(c), b, float(p))
            for b, p, c, s in zip(boxes, scores.tolist(), labels.tolist(), samples.tolist())]


def detections_of_samples(samples, side):
    """list of :class:`Detection` of data samples with ``pred_instances_3d`` (``bboxes_3d`` (D, 7), ``scores_3d``,
    ``labels_3d``)."""
    out = []
    for i, sample in enumerate(samples):
        pred = sample.pred_instances_3d
        boxes = getattr(pred.bboxes_3d, 'tensor', pred.bboxes_3d)
        out += detections_of(boxes[:, :7], pred.scores_3d, pred.labels_3d,
                             torch.full((boxes.shape[0],), i, dtype=torch.long), side)
    return out


def _rows(dets):
    return torch.stack([torch.cat([d.box[:7], d.box.new_tensor([d.score])]) for d in dets])


def pair_detections(deployed, reference, atol):
    """Match two detection lists per (sample, label) by mutual nearest neighbour (max abs over box and score).

    Args:
        deployed, reference (list[Detection]).
        atol (float): a pair farther apart than this is not a match.
    Returns:
        ``(pairs, only_deployed, only_reference)``: matched ``(deployed, reference)`` pairs; the rest of each side.
    """
    pairs, rest_a, rest_b = [], [], []
    keys = sorted({(d.sample, d.label) for d in deployed + reference})
    for key in keys:
        a = [d for d in deployed if (d.sample, d.label) == key]
        b = [d for d in reference if (d.sample, d.label) == key]
        while a and b:
            dist = (_rows(a)[:, None, :] - _rows(b)[None, :, :]).abs().amax(-1)  # (len(a), len(b))
            best_b, best_a = dist.argmin(1), dist.argmin(0)
            mutual = [i for i in range(len(a)) if int(best_a[best_b[i]]) == i and float(dist[i, best_b[i]]) <= atol]
            if not mutual:
                break
            taken = {int(best_b[i]) for i in mutual}
            pairs += [(a[i], b[int(best_b[i])]) for i in mutual]
            a = [d for i, d in enumerate(a) if i not in set(mutual)]
            b = [d for j, d in enumerate(b) if j not in taken]
        rest_a += a
        rest_b += b
    return pairs, rest_a, rest_b


class ScoreThreshold:
    """A box kept or dropped by ``score > threshold`` (``name``: the threshold's name, e.g. ``'score_thr'``)."""

    def __init__(self, threshold, name='score_thr', tol=DECISION_TOLERANCE):
        self.threshold, self.name, self.tol = float(threshold), name, tol

    def candidates(self, det, deployed, reference):
        """The :class:`Flip` that would explain ``det`` being on one side only."""
        return [Flip(det.describe(), 'score', det.score, self.name, self.threshold, self.tol)]


class NmsOverlap:
    """A box suppressed or kept by NMS (suppress when BEV IoU > ``iou_thr`` with a better box of its sample and
    label): explained by an IoU near ``iou_thr`` with a box of either side, or by a near-equal score of a box it
    overlaps (the order of the greedy pass flipped)."""

    def __init__(self, iou_thr, name='nms_iou_thr', tol=DECISION_TOLERANCE):
        self.iou_thr, self.name, self.tol = float(iou_thr), name, tol

    def candidates(self, det, deployed, reference):
        """Flips against every other box of the same sample and label."""
        others = [d for d in deployed + reference
                  if (d.sample, d.label) == (det.sample, det.label) and not torch.equal(d.box, det.box)]
        if not others:
            return []
        ious = boxes_iou_bev(det.box[None, :7].float(), torch.stack([d.box[:7] for d in others]).float())[0]
        out = []
        for other, iou in zip(others, ious.tolist()):
            out.append(Flip(f'{det.describe()} vs {other.describe()}', 'BEV IoU', iou, self.name, self.iou_thr,
                            self.tol))
            if iou > self.iou_thr:
                out.append(Flip(f'{det.describe()} vs overlapping {other.describe()}', 'score', det.score,
                                'NMS order (score of the overlapping box)', other.score, self.tol))
        return out


class RankCutoff:
    """A box kept or cut by a per-sample budget of the ``k`` best scores (``name``: e.g. ``'post_max'``):
    explained by a score near the k-th best score of a side that filled the budget."""

    def __init__(self, k, name, tol=DECISION_TOLERANCE):
        self.k, self.name, self.tol = int(k), name, tol

    def candidates(self, det, deployed, reference):
        """Flips against the k-th best score of each side with at least k boxes in the sample."""
        out = []
        for side in (deployed, reference):
            scores = sorted((d.score for d in side if d.sample == det.sample), reverse=True)
            if len(scores) >= self.k > 0:
                out.append(Flip(det.describe(), 'score', det.score, f'{self.name} cut-off (rank {self.k})',
                                scores[self.k - 1], self.tol))
        return out


def explain_detections(checks, deployed, reference, atol, label='detections'):
    """Explain the detections on one side only by the detection decisions ``checks``.

    Args:
        checks (Sequence): detection decisions (``candidates(det, deployed, reference) -> list[Flip]``).
        deployed, reference (list[Detection]).
        atol (float): box/score tolerance of a match (:func:`pair_detections`).
        label (str): what the detections are, for the messages.
    Returns:
        Explanation: per unmatched detection the closest near-tie flip, or an unexplained entry naming the
        closest decision.
    """
    _, only_a, only_b = pair_detections(deployed, reference, atol)
    flips, unexplained = [], []
    for det in only_a + only_b:
        found = [f for check in checks for f in check.candidates(det, deployed, reference)]
        best = min(found, key=lambda f: f.margin - f.tol, default=None)
        if best is not None and best.explained:
            flips.append(best)
        else:
            closest = f'; closest decision: {best.describe()}' if best is not None else ''
            unexplained.append(f'{label}: {det.describe()} score {det.score:.8g} has no counterpart within atol '
                               f'{atol:g}{closest}')
    return Explanation(flips, unexplained)


# ------------------------------------------------------------------------------------------------ graph outputs
class SelectionDecision:
    """Items selected per (group, class) when their score exceeds ``thresholds[c]`` and ranks among the
    ``budgets[c]`` best of the group (a sampler's threshold + top-k budget), recomputed from an output on both sides.

    Args:
        name (str): the decision, e.g. ``'foreground'``.
        scores (callable): ``scores(outputs, pre) -> (N, C)`` float scores of the valid items.
        groups (callable): ``groups(pre) -> (N,)`` int64 group (sample) of each item.
        thresholds, budgets (Sequence): per class.
        downstream (Sequence[str]): the outputs (and ``'detections'``) a flip of this decision changes.
        tol (float): near-tie tolerance on the score.
    """

    def __init__(self, name, scores, groups, thresholds, budgets, downstream, tol=DECISION_TOLERANCE):
        self.name, self.scores, self.groups = name, scores, groups
        self.thresholds, self.budgets = [float(t) for t in thresholds], [int(b) for b in budgets]
        self.downstream, self.tol = tuple(downstream), tol

    def selected(self, scores, groups):
        """(N, C) bool selection of ``scores`` (N, C) with ``groups`` (N,) (ties: the lower index first)."""
        keep = torch.zeros_like(scores, dtype=torch.bool)
        for c, (thr, budget) in enumerate(zip(self.thresholds, self.budgets)):
            for g in groups.unique().tolist():
                idx = torch.nonzero((groups == g) & (scores[:, c] > thr)).flatten()
                order = torch.sort(scores[idx, c], descending=True, stable=True).indices
                keep[idx[order[:budget]], c] = True
        return keep

    def flips(self, deployed, reference, pre):
        """list of :class:`Flip`, one per (item, class) whose selection differs, with its reference score's margin
        to the threshold or to the group's budget cut-off (the budget-th and next best reference scores), whichever
        is closer."""
        ref, dep = self.scores(reference, pre).double(), self.scores(deployed, pre).double()
        groups = self.groups(pre)
        flipped = torch.nonzero(self.selected(ref, groups) != self.selected(dep, groups)).tolist()
        out = []
        for i, c in flipped:
            value, g = float(ref[i, c]), groups[i]
            item = f'item {i} (group {int(g)}, class {c}) {self.name}'
            cands = [Flip(item, 'score', value, f'{self.name} threshold[{c}]', self.thresholds[c], self.tol)]
            above = torch.sort(ref[(groups == g) & (ref[:, c] > self.thresholds[c]), c], descending=True).values
            budget = self.budgets[c]
            for rank in (budget, budget + 1):
                if above.numel() > budget and rank <= above.numel():
                    cands.append(Flip(item, 'score', value, f'{self.name} budget cut-off (rank {rank})',
                                      float(above[rank - 1]), self.tol))
            out.append(min(cands, key=lambda f: f.margin))
        return out


def explain_outputs(checks, deployed, reference, pre, failing):
    """Explain failing graph outputs by the output decisions that flipped upstream of them.

    Args:
        checks (DecisionChecks): the adapter's decisions.
        deployed, reference (dict): graph outputs (ONNX Runtime, PyTorch).
        pre (PreOpsResult): the pre-ops result both ran on.
        failing (Sequence[str]): names of the outputs beyond their tolerance.
    Returns:
        ``(explanation, covered)``: the flips (near-ties, and beyond-tolerance ones as unexplained entries) and the
        set of names (outputs, ``'detections'``) they cover.  A name is covered only when every flip of its
        decision is a near-tie.
    """
    flips, unexplained, covered = [], [], set()
    for check in checks.outputs:
        found = check.flips(deployed, reference, pre)
        if not found:
            continue
        near = [f for f in found if f.explained]
        far = [f for f in found if not f.explained]
        flips += near
        unexplained += [f.describe() for f in far[:5]]
        unexplained += [f'... {len(far) - 5} more {check.name} flips beyond tol {check.tol:g}'] if len(far) > 5 else []
        if not far and any(name in check.downstream for name in failing):
            covered.update(check.downstream)
    return Explanation(flips, unexplained), covered


def explain_graph(adapter, deployed, reference, pre, failing, downstream_of=()):
    """Explain graph outputs beyond tolerance (ONNX Runtime ``deployed`` vs PyTorch ``reference``, dicts of outputs
    on the pre-ops result ``pre``) by the adapter's decisions: the output decisions that flipped upstream of them,
    then, for the adapter's ``detection_outputs``, the boxes on one side only.

    Args:
        adapter (DeployAdapter): declares ``decision_checks``, ``detection_outputs``, ``graph_detections``.
        failing (Sequence[str]): the outputs beyond tolerance.
        downstream_of (Sequence[str]): further names to cover by the output decisions (``'detections'``).
    Returns:
        ``(Explanation, set of explained names)``; the failing outputs left unexplained are listed in it.
    """
    checks = adapter.decision_checks()
    explanation, explained = explain_outputs(checks, deployed, reference, pre, list(failing) + list(downstream_of))
    boxes = [n for n in failing if n in adapter.detection_outputs and n not in explained]
    if boxes:
        found = explain_detections(checks.detections, adapter.graph_detections(deployed, 'deployed'),
                                   adapter.graph_detections(reference, 'PyTorch'), adapter.detection_atol,
                                   'graph boxes')
        explanation = explanation.merged(found)
        explained |= set(boxes) if found.ok else set()
    rest = [f'{n}: beyond tolerance and no decision that flipped explains it' for n in failing if n not in explained]
    return explanation.merged(Explanation([], rest)), explained


__all__ = ['DECISION_TOLERANCE', 'Flip', 'Explanation', 'DecisionChecks', 'Detection', 'detections_of',
           'detections_of_samples', 'pair_detections', 'ScoreThreshold', 'NmsOverlap', 'RankCutoff',
           'explain_detections', 'SelectionDecision', 'explain_outputs', 'explain_graph']
