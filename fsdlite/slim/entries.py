"""Which model-config integers are widths: found by perturbation, not by name.

Every integer in the model config (inside dicts, lists and tuples) is multiplied (by 2, else 3 or 5 when
that changes the set of layers), one at a time, and the model rebuilt; comparing parameter shapes with the
original tells what the entry controls:

* ``'width'``: it scales the output/per-channel dims of some layers exactly in proportion (its value is a
  channel count: a stage width, a hidden width, a bottleneck width derived from it, ...);
* ``'follower'``: it only changes input dims (an ``in_channels`` stated in the config); its new value is
  derived from the channels kept upstream;
* ``'fixed'``: anything else (kernel sizes, class counts, budgets, group sizes, depths);
* ``'unprobed'``: the perturbed config does not build (e.g. a consistency check against another entry);
  its value is solved against the expected shapes after slicing.
"""
import copy
from dataclasses import dataclass, field

from fsdlite.registry import MODELS

SKIP_KEYS = ('type',)
PROBE_FACTORS = (2, 3, 5)


@dataclass
class Entry:
    """One integer of the model config."""

    path: tuple
    value: int
    kind: str = 'fixed'
    dims: dict = field(default_factory=dict)   # dim id -> (old size, size at the probe, probe value)
    note: str = ''

    @property
    def name(self):
        """Dotted name of :attr:`path` (:func:`path_name`)."""
        return path_name(self.path)


def path_name(path):
    """Dotted name of a config path: ``('backbone', 'encoder_channels', 1, 0)`` -> 'backbone.encoder_channels.1.0'."""
    return '.'.join(str(p) for p in path)


def iter_ints(node, prefix=()):
    """``(path, value)`` of every int (not bool) under ``node`` (dicts, lists, tuples)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in SKIP_KEYS or str(k).startswith('_'):
                continue
            yield from iter_ints(v, prefix + (k,))
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from iter_ints(v, prefix + (i,))
    elif isinstance(node, int) and not isinstance(node, bool):
        yield prefix, node


def get_path(node, path):
    """The value at ``path`` (sequence of keys / indices) inside ``node``; KeyError / IndexError if absent."""
    for p in path:
        node = node[p]
    return node


def set_path(node, path, value):
    """Copy of ``node`` with ``path`` set to ``value`` (tuples rebuilt, dicts/lists copied)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        out = dict(node)
        out[head] = set_path(node[head], rest, value)
        return out
    items = list(node)
    items[head] = set_path(items[head], rest, value)
    return type(node)(items) if isinstance(node, tuple) else items


def param_shapes(model):
    """``{name: shape}`` of the parameters and persistent buffers (the state dict)."""
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def build_shapes(model_cfg):
    """Build ``model_cfg`` and return its :func:`param_shapes` (raises what the build raises)."""
    return param_shapes(MODELS.build(copy.deepcopy(model_cfg)))


def probe_entries(model_cfg, graph, base_shapes, log=None):
    """Classify every int of ``model_cfg`` (see the module docstring); returns a list of :class:`Entry`."""
    entries = []
    for path, value in iter_ints(model_cfg):
        entry = Entry(path, value)
        entries.append(entry)
        if value <= 0:
            entry.note = 'non-positive'
            continue
        observations, errors = [], []
        for factor in PROBE_FACTORS:
            try:
                shapes = build_shapes(set_path(model_cfg, path, factor * value))
            except Exception as exc:  # noqa: BLE001  (any build error: the entry is solved later)
                errors.append(f'{type(exc).__name__}: {exc}')
                continue
            observations.append((factor * value, shapes))
            if set(shapes) == set(base_shapes):
                break  # no layer appeared/disappeared: this probe saw every dim
        if not observations:
            entry.kind, entry.note = 'unprobed', errors[0]
            continue
        _classify(entry, observations, base_shapes, graph)
        if log is not None and entry.kind != 'fixed':
            log(f'  {entry.name}={value}: {entry.kind} ({len(entry.dims)} dims)')
    _probe_pairs(model_cfg, entries, graph, base_shapes)
    return entries


MAX_PAIRED = 8


def _probe_pairs(model_cfg, entries, graph, base_shapes):
    """Entries that only build when changed together (a width and an ``in_channels`` checked against it).

    For each entry whose probe failed, another failed entry is moved along (``f + k * (e' - e)`` for small
    k, or in proportion); when the pair builds, the first is classified from that probe and the second
    becomes a follower of the input dims that changed.
    """
    failed = [e for e in entries if e.kind == 'unprobed'][:MAX_PAIRED]
    for e in failed:
        if e.kind != 'unprobed':
            continue
        probe = 2 * e.value
        for f in failed:
            if f is e or f.kind != 'unprobed':
                continue
            candidates = [f.value + k * (probe - e.value) for k in (1, 2, 3, 4)] + [2 * f.value]
            for value in candidates:
                try:
                    shapes = build_shapes(set_path(set_path(model_cfg, e.path, probe), f.path, value))
                except Exception:  # noqa: BLE001
                    continue
                if set(shapes) != set(base_shapes):
                    continue
                trial = Entry(e.path, e.value)
                _classify(trial, [(probe, shapes)], base_shapes, graph)
                if trial.kind != 'width':
                    continue
                e.kind, e.note = 'width', f'probed with {f.name}'
                e.dims = {i: v for i, v in trial.dims.items() if graph.dims[i].constrained}
                follower = {i: (o, n, value) for i, (o, n, _) in trial.dims.items() if not graph.dims[i].constrained}
                if follower:
                    f.kind, f.dims, f.note = 'follower', follower, f'probed with {e.name}'
                break
            if e.kind != 'unprobed':
                break


def _changed_dims(probe, shapes, base, graph):
    """Dims whose size changes between ``base`` and ``shapes`` (params present in both), or a reason string."""
    dims = {}
    for name in set(shapes) & set(base):
        shape, old = shapes[name], base[name]
        if shape == old:
            continue
        if len(shape) != len(old):
            return f'changes the rank of {name}'
        for axis, (o, n) in enumerate(zip(old, shape)):
            if o == n:
                continue
            hits = [d for d, ax, _, _ in graph.by_param.get(name, ()) if ax == axis]
            if not hits:
                return f'changes {name} dim {axis} ({o} -> {n}), not a channel dim'
            for d in hits:
                dims[d.id] = (o, n, probe)
    return dims


def _classify(entry, observations, base, graph):
    """Classify from probes ``[(value, shapes)]``: dims seen in any probe (layers a probe switched off,
    e.g. a shortcut that disappears when two widths become equal, are seen in another probe)."""
    seen = {}
    for probe, shapes in observations:
        dims = _changed_dims(probe, shapes, base, graph)
        if isinstance(dims, str):
            entry.note = dims
            return
        for i, change in dims.items():
            seen.setdefault(i, change)
    if not seen:
        entry.note = ('changes the set of layers (a depth or structure entry)'
                      if any(set(s) != set(base) for _, s in observations) else 'no parameter shape depends on it')
        return
    constrained = [graph.dims[i] for i in seen if graph.dims[i].constrained]
    if not constrained:
        entry.kind, entry.dims = 'follower', seen
        return
    if not all(seen[d.id][1] * entry.value == seen[d.id][0] * seen[d.id][2] for d in constrained):
        entry.note = 'output widths change but not in proportion (e.g. a group count or a shared output)'
    elif any(u in graph.frozen for d in constrained for u in d.units):
        entry.note = 'controls channels that cannot be pruned (model outputs, inputs, unknown ops)'
    else:
        entry.kind, entry.dims = 'width', seen


def depth_paths(model_cfg):
    """Config paths that can name a stage for ``--depth``: sequences and the ints inside int sequences."""
    out = []

    def walk(node, prefix):
        if isinstance(node, dict):
            for k, v in node.items():
                if k not in SKIP_KEYS and not str(k).startswith('_'):
                    walk(v, prefix + (k,))
        elif isinstance(node, (list, tuple)) and node:
            if all(isinstance(v, int) and not isinstance(v, bool) for v in node):
                out.append(path_name(prefix))
                out.extend(path_name(prefix + (i,)) for i in range(len(node)))
            elif all(isinstance(v, (list, tuple)) for v in node):
                out.append(path_name(prefix))
                for i, v in enumerate(node):
                    walk(v, prefix + (i,))
    walk(model_cfg, ())
    return out


def parse_path(model_cfg, name):
    """Resolve a dotted name (ints for list positions) against ``model_cfg``; None if it does not exist."""
    node, path = model_cfg, []
    for part in name.split('.'):
        key = int(part) if part.lstrip('-').isdigit() and isinstance(node, (list, tuple)) else part
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return None
        path.append(key)
    return tuple(path)


__all__ = ['Entry', 'probe_entries', 'iter_ints', 'get_path', 'set_path', 'path_name', 'param_shapes',
           'build_shapes', 'depth_paths', 'parse_path']
