"""Capacity tiers: extra fixed-shape graphs at smaller pre-op bounds, the runtime picking one per input.

A deploy folder's bounds cover the largest input it must take (the detector configs keep ~2x headroom over the
frames measured), and a fixed-shape graph does the padded work whatever the input: an average frame pays for
capacity it does not use.  With tiers (``deploy/export_onnx.py --tiers 0.4 0.6``) the exporter also writes, for
each scale ``s < 1``, a graph whose **pre-op bounds** -- the sizes the pre-ops alone decide before the graph runs
(detectors: ``max_points``, ``max_voxels``, ``max_pairs``) -- are the folder's bounds times ``s`` (rounded up,
``fsdlite.structures.bounds.scale_bounds``), and so are the in-graph bounds a model lets the tiers scale
(``tier_scaled`` in the model's bound schema: FSDv2-lite's mixer voxels and pairs, whose use follows the frame); the other in-graph bounds
(foreground points, clusters, boxes) stay.
Each tier graph is an ordinary fixed-shape plain-ONNX graph, checked like ``model.onnx``.

At run time (:class:`~fsdlite.deploy.runtime.DeployedModel`) the pre-ops run for the smallest tier whose pre-op
bounds hold for the input (:func:`select_tier`); an input that fits no tier runs ``model.onnx`` with the full
bounds (and, as before, anything beyond them is dropped and counted).  A detector on pair lists (the static
configs) builds its exact first-stage rulebooks once per input (``fixed_shape.first_stage_rulebooks``), so
it knows what every UNet level and pair slot needs before it picks a tier, and tiles them for the tier it picks.
A detector on neighbour maps first tries the smallest tier whose points and input voxels fit; when a deeper level
overflows, it builds the maps once at the full bounds, counts what every level needs, and cuts the maps to the
chosen tier's bounds (``ConvPlan.shrink_rulebooks``) instead of trying tier after tier.  When the graph of the
chosen tier drops items in a scaled in-graph bound, the input runs again on the next tier (:func:`run_on_tiers`).
A tier only changes padding, so it returns what ``model.onnx`` returns on the same input (the per-point / per-voxel
outputs have the tier's row count).
"""
import time
from typing import NamedTuple


class Tier(NamedTuple):
    """One capacity tier of a deploy folder: ``scale`` (1.0: ``model.onnx``), ``bounds`` (dict), ``adapter`` (host
    adapter with these bounds: pre/post-ops) and ``graph`` (its :class:`~fsdlite.deploy.onnx_io.OrtGraph`)."""
    scale: float
    bounds: dict
    adapter: object
    graph: object


def check_tier_scales(tiers):
    """Sorted tier scales; raises a ValueError naming ``tiers`` unless each is a number in (0, 1), all distinct."""
    scales = []
    for value in tiers or ():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) < 1:
            raise ValueError(f'tiers: each scale must be a number in (0, 1) (1 is model.onnx itself), got {value!r} '
                             f'in {list(tiers)}')
        scales.append(float(value))
    if len(set(scales)) != len(scales):
        raise ValueError(f'tiers: scales must be distinct, got {list(tiers)}')
    return sorted(scales)


def select_tier(tiers, data):
    """Pre-ops for the smallest tier that holds ``data``.

    Args:
        tiers (Sequence[Tier]): ascending scales, the last one the full bounds (``model.onnx``).
        data: one batch of raw data (the family's format).
    Returns:
        ``(tier, pre)``: the chosen :class:`Tier` and its :class:`~fsdlite.deploy.adapter.PreOpsResult`.  A tier is
        taken when its pre-ops dropped nothing; tiers its adapter rules out (``may_fit``: e.g. more points than
        ``max_points``) are skipped without running their pre-ops; after a tier's pre-ops dropped something the
        largest tier's adapter measures what the input needs (``measure_needs``) so that ``may_fit`` decides the
        remaining tiers exactly; the last tier is taken in any case.
    """
    if not tiers:
        raise ValueError('select_tier: tiers must not be empty')
    largest = tiers[-1].adapter
    prepared = largest.prepare_input(data)
    for index, tier in enumerate(tiers):
        last = index == len(tiers) - 1
        if not last and not tier.adapter.may_fit(prepared):
            continue
        pre = tier.adapter.pre_ops(prepared)
        if last or not any(pre.dropped.values()):
            return tier, pre
        prepared = largest.measure_needs(prepared)  # a miss: let may_fit judge the remaining tiers exactly
    raise AssertionError('unreachable: the last tier is always taken')


def run_on_tiers(tiers, data, graph_seconds=None):
    """Pre-ops and graph on the smallest tier that holds ``data``, in-graph bounds included.

    :func:`select_tier` picks the tier by its pre-ops; when the graph then drops items in an in-graph bound the tiers
    scale (``adapter.tier_overflow``, e.g. FSDv2-lite's mixer voxels), the input runs again on the next larger tier
    that may hold it; the last tier is taken in any case.

    Args:
        tiers (Sequence[Tier]): ascending scales, the last one the full bounds.
        data: one batch of raw data (the family's format).
        graph_seconds (list, optional): receives the wall time of every graph run.
    Returns:
        ``(tier, pre, outputs, attempts)``: the tier taken, its pre-ops result and graph outputs, and the scales
        tried (the last one is the tier's).
    """
    prepared = tiers[-1].adapter.prepare_input(data) if tiers else data
    start, attempts = 0, []
    while True:
        tier, pre = select_tier(tiers[start:], prepared)
        started = time.perf_counter()
        outputs = tier.graph(pre.inputs)
        if graph_seconds is not None:
            graph_seconds.append(time.perf_counter() - started)
        attempts.append(tier.scale)
        index = next(i for i, t in enumerate(tiers) if t is tier)
        if index == len(tiers) - 1 or not tier.adapter.tier_overflow(outputs):
            return tier, pre, outputs, attempts
        start = index + 1


__all__ = ['Tier', 'check_tier_scales', 'select_tier', 'run_on_tiers']
