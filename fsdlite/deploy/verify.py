"""Verify a deploy folder against PyTorch (``deploy/verify_onnx.py`` is the command line).

For every verification input (the family's frames: the real lidar frames for detectors, the config's
synthetic test/val data for VoxelNet and KPConv) it runs

* the **deployed pipeline** (:class:`~fsdlite.deploy.runtime.DeployedModel`: pre-ops -> ONNX Runtime -> post-ops),
* the **same graph module in PyTorch** on the same pre-ops inputs (with the checkpoint's weights), and reports the
  max abs / rel difference of every graph output (valid rows),
* the **original PyTorch model** (eager, dynamic shapes) and whether its final predictions (detections after NMS,
  per-point / per-voxel labels) match the deployed ones.

An output beyond its tolerance gets a float64 check: the graph is re-run in PyTorch in float64 and the output still
passes when ONNX Runtime is no farther from the float64 result than PyTorch's own float32 run is (plus the
tolerance): the difference is then float32 rounding of an ill-conditioned value, not an export error.  It also
passes when ONNX Runtime is within the tolerance of the float64 result itself: PyTorch float32 then flipped a
near-tie (a threshold, top-k or cluster link) that ONNX Runtime and float64 decide alike.  Both distances are
printed.  Otherwise, when float64 lands more than :data:`FLOAT64_SAME_BRANCH` from PyTorch float32, the float64
run took other discrete decisions than both and cannot judge: the output fails.

A graph output still beyond its tolerance, or final predictions that differ, are then explained by the discrete
decisions that flipped (:mod:`fsdlite.deploy.decisions`, declared by the adapter's ``decision_checks``): a
selection recomputed from the outputs on both sides (detectors: foreground points) whose flipped items all sat
within a tolerance of their threshold or budget cut-off covers the outputs downstream of it; boxes present on one
side only are explained by a score at ``score_thr``, an IoU at the NMS threshold, a near-equal score of an
overlapping box or a score at a budget's cut-off.  Explained differences pass and are printed with their margins;
anything unexplained fails.

A folder with capacity tiers (:mod:`fsdlite.deploy.tiers`) is checked on the tier each input runs on, against the
PyTorch graph with that tier's bounds.

A frame whose data exceeds a bound is reported with the dropped counts; its final predictions are not expected to
match (truncation), so they do not count as a mismatch.  Where a bound raises instead of truncating (the pre-ops'
deeper UNet levels; in-graph rulebook levels when the graph runs eagerly in PyTorch), the frame is reported as
"bound exceeded" with the error, not as a failure: raise the bounds and re-export.
"""
import copy
from pathlib import Path
from typing import NamedTuple

from ..structures.bounds import BoundExceededError
from .decisions import Explanation, explain_detections, explain_graph
from .exporter import adapter_with_bounds, prepare
from .runtime import DeployedModel, read_deploy_config

#: largest PyTorch float32 vs float64 distance for which the float64 check is trusted (same discrete decisions)
FLOAT64_SAME_BRANCH = 1e-2


class FrameCheck(NamedTuple):
    """Verification of one input.

    ``name``, ``source``; ``diffs`` list of :class:`~fsdlite.deploy.compare.OutputDiff` (ORT vs PyTorch graph);
    ``match`` :class:`~fsdlite.deploy.compare.Match` of the final predictions vs the eager model (None on error);
    ``dropped`` dict bound name -> items dropped (pre-ops and graph); ``seconds`` deployed stage times;
    ``error`` str ('' when the frame ran): the bound that raised; ``fp64`` dict output name ->
    ``(ort_vs_float64, torch_float32_vs_float64)`` max abs distances, for outputs beyond their tolerance;
    ``tier`` the capacity tier that ran (1.0: ``model.onnx``); ``attempts`` the tiers whose graph ran (more than
    one when a tier's graph overflowed an in-graph bound the tiers scale, :func:`~fsdlite.deploy.tiers.run_on_tiers`);
    ``explanation`` :class:`~fsdlite.deploy.decisions.Explanation` of the differences (None: nothing to explain);
    ``explained`` the output names (and ``'detections'``: the final predictions) whose differences it explains.
    """
    name: str
    source: str
    diffs: list
    match: object
    dropped: dict
    seconds: dict
    error: str = ''
    fp64: dict = {}
    tier: float = 1.0
    attempts: tuple = ()
    explanation: object = None
    explained: frozenset = frozenset()

    def output_ok(self, diff):
        """Within tolerance, no farther from float64 than PyTorch float32 is, or explained by decisions that flipped
        on near-ties (see the module docstring)."""
        return self.numeric_ok(diff) or diff.name in self.explained

    def numeric_ok(self, diff):
        """Within tolerance, or no farther from float64 than PyTorch float32 is."""
        if diff.ok:
            return True
        if diff.name not in self.fp64:
            return False
        ort64, torch64 = self.fp64[diff.name]
        if ort64 <= diff.tolerance:  # ONNX Runtime equals the float64 graph: PyTorch float32 flipped a near-tie
            return True
        return torch64 <= FLOAT64_SAME_BRANCH and ort64 <= torch64 + diff.tolerance

    @property
    def exceeded(self):
        """True when some bound was exceeded (items dropped, or a bound raised)."""
        return bool(self.error) or any(v for v in self.dropped.values())

    @property
    def ok(self):
        """Graph outputs within tolerance and, when no bound was exceeded, the same final predictions."""
        if self.error:
            return True  # a bound raised: reported, nothing to compare
        return all(self.output_ok(d) for d in self.diffs) and (self.exceeded or self.results_ok)

    @property
    def results_ok(self):
        """The final predictions match, or their differences are explained."""
        return bool(self.match and self.match.same) or 'detections' in self.explained


def reference_adapter(directory, info, checkpoint=None, data_root=None, frames=None):
    """The adapter with the PyTorch weights of a deploy folder, and its verification frames.

    Args:
        directory (Path): the deploy folder.
        info (dict): its deploy.json.
        checkpoint (str, optional): weights (default: the checkpoint recorded at export; 'random' rebuilds the
            seeded random weights the export used).
        data_root (str, optional): folder of the real frames.
        frames (list[Frame], optional): inputs to verify on (default: the adapter's).
    Returns:
        ``(adapter, frames)``
    """
    checkpoint = checkpoint or info['checkpoint']
    if checkpoint != 'random' and not Path(checkpoint).is_file():
        raise FileNotFoundError(f'checkpoint {checkpoint!r} recorded in {directory}/deploy.json does not exist; '
                                'pass --checkpoint')
    _, adapter, frames, _ = prepare(Path(directory) / info['config'], checkpoint, batch_size=info['batch_size'],
                                    data_root=data_root, frames=frames, bounds=info['bounds'])
    adapter.load_host_state(info.get('host_state', {}))
    return adapter, frames


def check_frame(deployed, references, frame):
    """:class:`FrameCheck` of one :class:`~fsdlite.deploy.adapter.Frame` (see the module docstring);
    ``references``: capacity tier scale -> adapter with the PyTorch weights and that tier's bounds."""
    try:
        out = deployed.run(frame.data)
    except BoundExceededError as err:
        return FrameCheck(frame.name, frame.source, [], None, {err.name: err.needed - err.allowed}, {},
                          f'pre-ops: {err}')
    adapter = references[out.tier]
    try:
        torch_outputs = adapter.run_torch_graph(out.pre.inputs)
    except BoundExceededError as err:  # ONNX Runtime truncated and counted; eager PyTorch raises
        return FrameCheck(frame.name, frame.source, [], None, out.dropped, out.seconds, f'PyTorch graph: {err}',
                          tier=out.tier, attempts=out.attempts)
    diffs = adapter.compare_outputs(out.outputs, torch_outputs, out.pre)
    fp64 = float64_distances(adapter, out, torch_outputs, [d.name for d in diffs if not d.ok])
    reference_results = adapter.reference(frame.data)
    match = adapter.compare_results(out.results, reference_results)
    check = FrameCheck(frame.name, frame.source, diffs, match, out.dropped, out.seconds, fp64=fp64, tier=out.tier,
                       attempts=out.attempts)
    failing = [d.name for d in diffs if not check.numeric_ok(d)]
    results_differ = not match.same and not check.exceeded
    if not failing and not results_differ:
        return check
    explanation, explained = explain_frame(adapter, out, torch_outputs, failing, results_differ, reference_results)
    return check._replace(explanation=explanation, explained=explained)


def explain_frame(adapter, out, torch_outputs, failing, results_differ, reference_results):
    """Explain failing graph outputs and differing final predictions by the adapter's decisions that flipped.

    Args:
        adapter (DeployAdapter): with the PyTorch weights.
        out (DeployOutput): the deployed run.
        torch_outputs (dict): the graph in PyTorch on the same inputs.
        failing (list[str]): outputs beyond tolerance (after the float64 check).
        results_differ (bool): the final predictions differ from the eager model's ``reference_results``.
    Returns:
        ``(Explanation, frozenset of explained names)`` (outputs, and ``'detections'`` for the final predictions).
    """
    extra = ['detections'] if results_differ else []
    explanation, explained = explain_graph(adapter, out.outputs, torch_outputs, out.pre, failing, extra)
    if results_differ and 'detections' not in explained:
        deployed = adapter.result_detections(out.results, 'deployed')
        if deployed is None:
            found = Explanation([], ['final predictions differ (the model declares no decisions to explain them)'])
        else:
            found = explain_detections(adapter.decision_checks().detections, deployed,
                                       adapter.result_detections(reference_results, 'PyTorch'),
                                       adapter.detection_atol, 'final detections')
        explanation = explanation.merged(found)
        explained |= {'detections'} if found.ok else set()
    return explanation, frozenset(explained)


def float64_distances(adapter, out, torch_outputs, names):
    """``name -> (ORT vs float64, PyTorch float32 vs float64)`` max abs distances of the named outputs.

    The graph module runs in float64 on a copy of the model (float inputs cast to float64); empty when ``names``
    is empty.
    """
    if not names:
        return {}
    wide = copy.copy(adapter)
    wide.model = copy.deepcopy(adapter.model).double()
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in out.pre.inputs.items()}
    reference = wide.run_torch_graph(inputs)
    ort64 = {d.name: d.max_abs for d in adapter.compare_outputs(out.outputs, reference, out.pre)}
    torch64 = {d.name: d.max_abs for d in adapter.compare_outputs(torch_outputs, reference, out.pre)}
    return {n: (ort64[n], torch64[n]) for n in names if n in ort64 and n in torch64}


def verify_deploy(directory, checkpoint=None, data_root=None, frames=None, threads=1):
    """Run :func:`check_frame` on every verification input of a deploy folder.

    Args:
        directory (str | Path): folder written by ``deploy/export_onnx.py``.
        checkpoint, data_root, frames: see :func:`reference_adapter`.
        threads (int): ONNX Runtime intra-op threads.
    Returns:
        list[FrameCheck]
    Raises:
        ValueError: there is no input to verify on.
    """
    deployed = DeployedModel(directory, threads)
    adapter, frames = reference_adapter(deployed.directory, deployed.info, checkpoint, data_root, frames)
    if not frames:
        raise ValueError(f'no verification input for {deployed.info["model_type"]}: no real frame under the data '
                         'root and no dataset in the config')
    model_cfg = read_deploy_config(deployed.directory, deployed.info).model
    references = {tier.scale: adapter_with_bounds(type(adapter), model_cfg, tier.bounds, adapter.batch_size,
                                                  adapter.model.state_dict(), adapter.host_state())
                  for tier in deployed.tiers[:-1]}  # the same weights at each tier's bounds
    references[1.0] = adapter
    return [check_frame(deployed, references, frame) for frame in frames]


def format_checks(checks):
    """Human-readable table of :func:`verify_deploy` results (str)."""
    lines = []
    for c in checks:
        lines.append(f'== {c.name} ({c.source})')
        if c.error:
            exceeded = {k: v for k, v in c.dropped.items() if v}
            lines.append(f'   BOUND EXCEEDED, not compared (raise the bounds and re-export): {c.error}; '
                         f'dropped {exceeded}')
            continue
        times = ', '.join(f'{k} {v * 1e3:.1f} ms' for k, v in c.seconds.items())
        tier = f'capacity tier {c.tier:g}, ' if c.tier != 1.0 else ''
        if len(c.attempts) > 1:
            tried = ', '.join(f'{t:g}' for t in c.attempts[:-1])
            tier = f'capacity tier {c.tier:g} (tier {tried} overflowed an in-graph bound the tiers scale), '
        lines.append(f'   deployed: {tier}{times}')
        exceeded = {k: v for k, v in c.dropped.items() if v}
        lines.append(f'   dropped (bounds exceeded): {exceeded}' if exceeded else '   bounds: all held (0 dropped)')
        lines.append(f'   {"output":<16} {"compared":>9} {"max abs":>10} {"max rel":>10}  tolerance  ok')
        for d in c.diffs:
            tol = '-' if d.tolerance is None else f'{d.tolerance:g}'
            ort64, torch64 = c.fp64.get(d.name, (0, 0))
            verdict = 'yes' if d.ok else ('yes (float32 noise)' if c.numeric_ok(d) else 'NO')
            if not c.numeric_ok(d) and d.name in c.explained:
                verdict = 'yes (a decision flipped on a near-tie, below)'
            elif not d.ok and c.numeric_ok(d) and torch64 > FLOAT64_SAME_BRANCH:
                verdict = 'yes (PyTorch float32 flipped a near-tie; ONNX Runtime = float64)'
            elif not d.ok and torch64 > FLOAT64_SAME_BRANCH:
                verdict = 'NO (float64 took other discrete decisions: undetermined)'
            lines.append(f'   {d.name:<16} {d.compared:>9} {d.max_abs:>10.2e} {d.max_rel:>10.2e}  {tol:>9}  {verdict}')
        for name, (ort64, torch64) in c.fp64.items():
            lines.append(f'   {name}: float64 PyTorch graph vs ONNX Runtime {ort64:.2e}, '
                         f'vs PyTorch float32 {torch64:.2e}')
        verdict = 'yes' if c.match.same else ('no (expected: bounds exceeded)' if c.exceeded else 'NO')
        if not c.match.same and not c.exceeded and c.results_ok:
            verdict = 'no, explained by decisions that flipped on near-ties (below)'
        lines.append(f'   final predictions match the eager PyTorch model: {verdict}; {c.match.detail}')
        if c.explanation is not None:
            state = 'all explained' if c.explanation.ok else 'NOT all explained'
            lines.append(f'   differences ({state}) by the decisions that flipped:')
            lines += [f'     {line}' for line in c.explanation.lines()]
    matched = sum(c.ok and not c.exceeded for c in checks)
    over = sum(c.exceeded for c in checks)
    failed = sum(not c.ok for c in checks)
    lines.append(f'{len(checks)} inputs: {matched} verified, {over} exceeded a bound (reported), {failed} failed')
    return '\n'.join(lines)


__all__ = ['FLOAT64_SAME_BRANCH', 'FrameCheck', 'reference_adapter', 'check_frame', 'explain_frame', 'verify_deploy',
           'format_checks']
