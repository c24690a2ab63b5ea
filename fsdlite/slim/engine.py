"""The slimming engine: trace -> classify config entries -> choose channels -> slimmed config + weights.

:func:`slim_model` takes a built model, its model config (a dict), a preprocessed sample batch and a
:class:`SlimRequest`, and returns a :class:`SlimResult` whose ``model_cfg`` builds the slimmed model and
whose ``state_dict`` loads into it with ``strict=True``. Widths come from the config (every width entry
scaled by the request), channels from importance within coupled groups (:mod:`fsdlite.slim.select`),
depth from truncated per-stage tuples (:mod:`fsdlite.slim.depth`).
"""
import math
from dataclasses import dataclass, field

from .compensate import RIDGE, compensate_state, input_moments
from .depth import apply_depth, bridge_regions, dropped_leaves
from .entries import build_shapes, get_path, iter_ints, parse_path, path_name, probe_entries, set_path
from .errors import SlimError
from .graph import ChannelGraph
from .select import select_units, unit_importance
from .trace import trace_channels
from .transfer import kept_indices, slice_state_dict


@dataclass
class SlimRequest:
    """What to slim.

    Args:
        width (float): ratio of channels kept in every width entry, in (0, 1].
        depth (dict): stage name (dotted model-config path) -> number of blocks kept.
        ratios (dict): config path prefix -> width ratio for the width entries under it (overrides ``width``).
        divisor (int): slimmed widths are rounded to multiples of it.
    """

    width: float = 1.0
    depth: dict = field(default_factory=dict)
    ratios: dict = field(default_factory=dict)
    divisor: int = 1

    def validate(self):
        """Check the ratios (in (0, 1]) and ``divisor`` (positive int); returns ``self``.

        Raises:
            SlimError: a ratio or the divisor is out of range.
        """
        for name, r in [('--width', self.width)] + [(f'--keep-ratio-per-stage {k}', v) for k, v in self.ratios.items()]:
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or not 0 < r <= 1:
                raise SlimError(f'{name}={r!r}: expected a ratio of kept channels in (0, 1]')
        if isinstance(self.divisor, bool) or not isinstance(self.divisor, int) or self.divisor < 1:
            raise SlimError(f'--divisor={self.divisor!r}: expected a positive integer')
        return self

    def ratio_for(self, name):
        """Width ratio of the entry ``name``: that of the longest matching ``ratios`` prefix, else ``width``."""
        best = None
        for prefix in self.ratios:
            if name == prefix or name.startswith(prefix + '.'):
                if best is None or len(prefix) > len(best):
                    best = prefix
        return self.ratios[best] if best is not None else self.width


@dataclass
class SlimResult:
    """Outcome of :func:`slim_model`."""

    model_cfg: dict
    state_dict: dict
    changes: list                 #: [(entry name, old value, new value, kind)]
    layers: list                  #: [(dim description, original width, kept width)]
    entries: list                 #: every probed :class:`~fsdlite.slim.entries.Entry`
    dropped: list                 #: names of the layers removed by depth reduction
    bridged: list                 #: stages whose dropped blocks were bridged channel-to-channel
    notes: list = field(default_factory=list)
    #: [(layer, original width, kept width, unexplained fraction)] of the compensated layers (calibrated analyses)
    compensation: list = field(default_factory=list)
    graph: object = None          #: the :class:`~fsdlite.slim.graph.ChannelGraph` the selection used
    indices: dict = None          #: dim id -> kept columns (LongTensor)


def _scaled(value, ratio, divisor):
    if ratio >= 1:
        return value
    return min(value, max(divisor, int(round(value * ratio / divisor)) * divisor))


def _exists(cfg, path):
    try:
        get_path(cfg, path)
        return True
    except (KeyError, IndexError, TypeError):
        return False


def _expected_shapes(base_shapes, graph, indices, names):
    """``{slimmed-model name: shape}`` for ``names`` (slimmed name -> original name)."""
    out = {}
    for new, name in names.items():
        shape = list(base_shapes[name])
        for d, axis, _, _ in graph.by_param.get(name, ()):
            shape[axis] = int(indices[d.id].numel())
        out[new] = tuple(shape)
    return out


def _mismatches(expected, shapes):
    return {n: (expected.get(n), shapes.get(n)) for n in set(expected) | set(shapes)
            if expected.get(n) != shapes.get(n)}


def _try_build(cfg):
    try:
        return build_shapes(cfg), None
    except Exception as exc:  # noqa: BLE001  (reported to the user if nothing better is found)
        return None, exc


def _solve_unprobed(cfg, entries, expected, base_shapes, width):
    """Search values of entries that could not be probed so that the slimmed config builds with the expected shapes."""
    ratios = {round(width, 6)}
    for name, shape in expected.items():
        for new, old in zip(shape, base_shapes.get(name, shape)):
            if old and new != old:
                ratios.add(round(new / old, 6))
    shapes, err = _try_build(cfg)
    score = len(_mismatches(expected, shapes)) if shapes is not None else math.inf
    for e in entries:
        if not _exists(cfg, e.path) or get_path(cfg, e.path) != e.value:
            continue
        for r in sorted(ratios):
            value = int(round(e.value * r))
            if value <= 0 or value == e.value:
                continue
            trial = set_path(cfg, e.path, value)
            got, _ = _try_build(trial)
            if got is None:
                continue
            s = len(_mismatches(expected, got))
            if s < score:
                cfg, shapes, score, err = trial, got, s, None
            if score == 0:
                return cfg, shapes, None
    return cfg, shapes, err


def _dim_size(shapes, dim):
    """Width of ``dim`` in a built model's ``{param: shape}`` (None if its layer is absent)."""
    for pname, axis, _, _ in dim.params:
        if pname in shapes:
            return shapes[pname][axis]
    return None


def _fit_followers(cfg, followers, graph, indices, active):
    """Set follower entries (input widths stated in the config) so that their input dims get the kept widths.

    With a config that builds, only the dims whose built width differs from the kept width vote (a width that
    also depends on slimmed upstream layers is already right); otherwise every dim votes through the probed
    linear relation. Returns the config and ``[(name, old, new, 'follower')]``.
    """
    for _ in range(3):
        shapes, _ = _try_build(cfg)
        moved = False
        for e in followers:
            if not _exists(cfg, e.path):
                continue
            current = get_path(cfg, e.path)
            votes = []
            for i, (old, probed, probe) in e.dims.items():
                if i not in active:
                    continue
                slope = (probed - old) / (probe - e.value)
                have = _dim_size(shapes, graph.dims[i]) if shapes is not None else old + (current - e.value) * slope
                want = int(indices[i].numel())
                if have is not None and have != want:
                    votes.append(current + (want - have) / slope)
            votes = [int(v) for v in votes if v == int(v) and v > 0]
            if votes:
                best = max(set(votes), key=votes.count)
                if best != current:
                    cfg, moved = set_path(cfg, e.path, best), True
        if not moved:
            break
    changes = [(e.name, e.value, get_path(cfg, e.path), 'follower') for e in followers
               if _exists(cfg, e.path) and get_path(cfg, e.path) != e.value]
    return cfg, changes


def _plan(graph, state, base_shapes, entries, cfg_d, request, active, names, log):
    """One attempt: targets -> units -> config; returns (cfg, indices, changes) or raises SlimError."""
    width_changes = {}
    targets = {d.id: d.size for d in graph.dims if d.constrained and d.id in active}
    for e in entries:
        if e.kind != 'width' or not _exists(cfg_d, e.path) or get_path(cfg_d, e.path) != e.value:
            continue
        new = _scaled(e.value, request.ratio_for(e.name), request.divisor)
        if new == e.value:
            continue
        width_changes[e.path] = (e, new)
        for dim_id, (old, _, _) in e.dims.items():
            if dim_id in targets:
                t = old * new // e.value
                if targets[dim_id] not in (graph.dims[dim_id].size, t):
                    raise SlimError(f'{graph.dims[dim_id]} gets width {targets[dim_id]} from one config entry and {t} '
                                    f'from {e.name}; give them the same ratio')
                targets[dim_id] = t
    importance = unit_importance(graph, state)
    for _ in range(4):
        kept = select_units(graph, targets, importance, active)
        indices = kept_indices(graph, kept)
        cfg = cfg_d
        changes = []
        for path, (e, new) in width_changes.items():
            cfg = set_path(cfg, path, new)
            changes.append((e.name, e.value, new, 'width'))
        cfg, fitted = _fit_followers(cfg, [e for e in entries if e.kind == 'follower'], graph, indices, active)
        changes += fitted
        expected = _expected_shapes(base_shapes, graph, indices, names)
        shapes, err = _try_build(cfg)
        if shapes is None or _mismatches(expected, shapes):
            unprobed = [e for e in entries if e.kind == 'unprobed']
            cfg2, shapes, err = _solve_unprobed(cfg, unprobed, expected, base_shapes, request.width)
            for e in unprobed:
                if _exists(cfg2, e.path) and get_path(cfg2, e.path) != get_path(cfg, e.path):
                    changes.append((e.name, e.value, get_path(cfg2, e.path), 'solved'))
            cfg = cfg2
        if shapes is None:
            raise SlimError(f'the slimmed model config does not build: {type(err).__name__}: {err}')
        bad = _mismatches(expected, shapes)
        if not bad:
            return cfg, indices, changes
        layers = sorted({n.rsplit('.', 1)[0] for n, (e, g) in bad.items() if e is None or g is None})
        if layers:
            raise SlimError(f'the slimmed widths build a different set of layers ({", ".join(layers[:4])}'
                            f'{" ..." if len(layers) > 4 else ""} exist in only one of the models), e.g. a shortcut '
                            'that exists only when two widths differ; choose other ratios for these stages')
        retarget = False
        for name, (exp, got) in bad.items():
            for d, axis, _, _ in graph.by_param.get(name, ()):
                if exp is not None and got is not None and d.id in targets and got[axis] != exp[axis]:
                    targets[d.id], retarget = got[axis], True   # e.g. a width derived with integer division
        if not retarget:
            break
    lines = [f'{n}: expected {e}, the slimmed config gives {g}' for n, (e, g) in sorted(bad.items())[:8]]
    raise SlimError('the slimmed config and the selected channels disagree:\n  ' + '\n  '.join(lines))


class SlimAnalysis:
    """Trace + config probing of one model, reusable for several requests (:meth:`slim`).

    Args:
        model (nn.Module): the trained model (its weights are the source).
        model_cfg (dict): the model config it was built from (plain dict).
        data (dict): one preprocessed sample batch (``inputs``, ``data_samples``) for the trace.
        log (callable, optional): progress messages.
    """

    def __init__(self, model, model_cfg, data, log=None):
        self.log = log or (lambda msg: None)
        self.model_cfg = model_cfg
        self.state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        self.base_shapes = {k: tuple(v.shape) for k, v in self.state.items()}
        self.log('tracing channel dependencies on the sample ...')
        self.tracer = trace_channels(model, data)
        self.graph = ChannelGraph.from_tracer(self.tracer)
        self.log(f'probing {sum(1 for _ in iter_ints(model_cfg))} config integers ...')
        self.entries = probe_entries(model_cfg, self.graph, self.base_shapes)
        self.moments, self.ridge = {}, RIDGE

    def calibrate(self, model, batches, ridge=RIDGE):
        """Measure the input channel moments of every layer on ``batches`` (preprocessed batches of the original
        ``model``); later :meth:`slim` calls fold the least-squares prediction of each dropped input channel into
        the kept ones (:mod:`fsdlite.slim.compensate`, ``ridge`` relative to the kept variance). Returns the
        number of layers observed."""
        self.moments, self.ridge = input_moments(model, self.graph.dims, batches), ridge
        return len(self.moments)

    def width_entries(self):
        """Names of the config entries found to be channel widths."""
        return [e.name for e in self.entries if e.kind == 'width']

    def slim(self, request):
        """Plan and transfer for ``request`` (:class:`SlimRequest`); returns a :class:`SlimResult`."""
        request.validate()
        for prefix in request.ratios:
            if not any(n == prefix or n.startswith(prefix + '.') for n in self.width_entries()):
                raise SlimError(f'--keep-ratio-per-stage {prefix!r} matches no width entry of the config; width '
                                f'entries: {", ".join(self.width_entries())}')
        cfg_d, regions, renames = apply_depth(self.model_cfg, request.depth, self.base_shapes)
        removed = set().union(*(r for _, r in regions)) if regions else set()
        moved = {old: new for new, old in renames.items()}   # layers that shift position (a Sequential's tail)
        names = {moved.get(n, n): n for n in self.base_shapes if n not in removed}
        graph, bridged = self.graph, []
        for attempt in ('plain', 'bridged'):
            leaves = dropped_leaves(graph, regions)
            active = {d.id for d in graph.dims if d.leaf not in leaves}
            try:
                cfg, indices, changes = _plan(graph, self.state, self.base_shapes, self.entries, cfg_d, request,
                                              active, names, self.log)
                break
            except SlimError:
                if attempt == 'bridged' or not regions:
                    raise
                store = self.tracer.store.fork()
                bridged = bridge_regions(self.tracer, graph, regions, store)
                if not bridged:
                    raise
                graph = ChannelGraph.from_tracer(self.tracer, store)
        for name, n in request.depth.items():
            path = parse_path(self.model_cfg, name)
            old = get_path(self.model_cfg, path)
            changes.append((name, len(old) if isinstance(old, (list, tuple)) else old, n, 'depth'))
        state, compensation = self.state, []
        if self.moments:
            state, compensation = compensate_state(self.state, graph, indices, self.moments, self.ridge)
        sliced = slice_state_dict(state, graph, indices, set(names.values()))
        sliced = {new: sliced[old] for new, old in names.items()}
        dropped = dropped_leaves(graph, regions)
        layers = [(str(d), d.size, int(indices[d.id].numel())) for d in graph.dims
                  if d.constrained and d.leaf not in dropped]
        notes = []
        if graph.conservative_ops:
            notes.append(f'ops without a channel rule (their channels were kept): {graph.conservative_ops}')
        if graph.unexercised:
            notes.append(f'layers whose forward the sample did not call (their channels were kept): '
                         f'{graph.unexercised}')
        if self.moments:
            done = {leaf for leaf, *_ in compensation}
            plain = sorted({d.leaf for d in graph.dims if d.role == 'in' and d.leaf not in dropped
                            and d.leaf not in done and indices[d.id].numel() < d.size})
            if plain:
                notes.append(f'layers that lose inputs but were sliced without compensation (no usable calibration '
                             f'statistics or weight layout): {plain}')
        return SlimResult(cfg, sliced, changes, layers, self.entries, sorted(dropped), bridged, notes, compensation,
                          graph, indices)


def slim_model(model, model_cfg, data, request, log=None):
    """Slim ``model`` (built from ``model_cfg``) as asked by ``request``: ``SlimAnalysis(...).slim(request)``."""
    request.validate()
    return SlimAnalysis(model, model_cfg, data, log).slim(request)


__all__ = ['SlimRequest', 'SlimResult', 'SlimAnalysis', 'slim_model', 'path_name']
