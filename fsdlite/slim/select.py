"""Choose which units (coupled channel sets) to keep, by importance, so every layer gets its target width.

Targets are widths of output / per-channel / parameter dims (set by the slimmed config); input dims
follow. Within a group of coupled dims, units are sorted into *classes* by how many columns they hold in
each constrained dim (a residual chain has one class; the sparse UNet's merge has one class per half of
its concatenated input). Class sizes are solved from the targets (one unknown at a time), then the most
important units of each class are kept. Importance of a unit = sum over its columns of that column's L1
norm (filters, input slices, |gamma| of norms), each dim normalised by its mean.
"""
from collections import Counter

import torch

from .errors import SlimError


def column_scores(dim, state):
    """(size,) importance of each column of ``dim``: L1 of its slice of the dim's first parameter, / mean."""
    for pname, axis, view, view_axis in dim.params:
        t = state.get(pname)
        if t is None or not torch.is_floating_point(t):
            continue
        t = t.detach().float()
        if view is not None and t.dim() > 1:
            t, axis = t.reshape(view), view_axis
        if t.shape[axis] != dim.size:
            continue
        scores = t.abs().movedim(axis, 0).reshape(dim.size, -1).sum(1)
        mean = scores.mean()
        return scores / mean if mean > 0 else torch.ones(dim.size)
    return torch.ones(dim.size)


def unit_importance(graph, state, dims=None):
    """``{unit: importance}`` summed over the unit's columns in ``dims`` (default: all)."""
    out = Counter()
    for d in graph.dims:
        if dims is not None and d.id not in dims:
            continue
        scores = column_scores(d, state).tolist()
        for col, u in enumerate(d.units):
            if u is not None:
                out[u] += scores[col]
    return out


def _describe(graph, dim_ids, targets):
    return ', '.join(f'{graph.dims[i].leaf} ({graph.dims[i].role}: {graph.dims[i].size} -> {targets[i]})'
                     for i in dim_ids)


def select_units(graph, targets, importance, active):
    """Units to keep.

    Args:
        graph (ChannelGraph): the traced channel graph.
        targets (dict): dim id -> kept width, for every constrained dim in ``active``.
        importance (dict): unit -> score.
        active (set): ids of dims of layers that exist in the slimmed model (dropped blocks excluded).
    Returns:
        set: kept units.
    Raises:
        SlimError: the targets cannot be met by keeping whole units (names the coupled layers).
    """
    kept = set()
    for group in graph.groups():
        constrained = [i for i in group if i in active and graph.dims[i].constrained]
        units = {u for i in group for u in graph.dims[i].units if u is not None}
        signature = {}
        for u in units:
            counts = Counter(dim for dim, _ in graph.members[u] if dim in constrained)
            signature[u] = tuple(sorted(counts.items()))
        remaining = {i: targets[i] for i in constrained}
        classes = {}
        for u in units:
            if u in graph.frozen:
                kept.add(u)
                for dim, m in signature[u]:
                    remaining[dim] -= m
            elif signature[u]:
                classes.setdefault(signature[u], []).append(u)
            # else: no layer of the slimmed model creates it (e.g. the outputs of a dropped block)
        for dim, rest in remaining.items():
            if rest < 0:
                raise SlimError(f'{graph.dims[dim]} holds channels that cannot be pruned (they leave the model or '
                                f'come from its input) but the slimmed config keeps only {targets[dim]} of its '
                                f'{graph.dims[dim].size} channels; keep this layer at full width')
        counts = _solve(graph, classes, remaining, constrained, targets)
        for sig, members in classes.items():
            ranked = sorted(members, key=lambda u: (-importance.get(u, 0.0), u))
            kept.update(ranked[:counts[sig]])
    return kept


def _solve(graph, classes, remaining, constrained, targets):
    """Number of units to keep per class so that every constrained dim meets its target."""
    count = {}
    mult = {sig: dict(sig) for sig in classes}
    changed = True
    while changed:
        changed = False
        for dim in constrained:
            involved = [s for s in classes if dim in mult[s]]
            unknown = [s for s in involved if s not in count]
            rest = remaining[dim] - sum(count[s] * mult[s][dim] for s in involved if s in count)
            if len(unknown) == 1:
                s = unknown[0]
                m = mult[s][dim]
                n, leftover = divmod(rest, m)
                if leftover or not 0 <= n <= len(classes[s]):
                    coupled = [i for i in constrained if i in mult[s]]
                    why = (f'its channels come in coupled sets of {m}' if leftover else
                           f'only {len(classes[s])} coupled sets exist')
                    raise SlimError(f'cannot keep {targets[dim]} of the {graph.dims[dim].size} channels of '
                                    f'{graph.dims[dim]}: {why} (coupled with {_describe(graph, coupled, targets)}); '
                                    'choose widths that are multiples of the set size (--divisor)')
                count[s] = n
                changed = True
            elif not unknown and rest != 0:
                coupled = sorted({i for s in involved for i in mult[s]})
                raise SlimError(f'coupled layers must keep matching channels, but the slimmed config asks for '
                                f'{_describe(graph, coupled, targets)}; give coupled stages the same width ratio')
    missing = [s for s in classes if s not in count]
    if missing:
        dims = sorted({i for s in missing for i in mult[s]})
        raise SlimError(f'cannot decide how many channels to keep in the coupled layers '
                        f'{_describe(graph, dims, targets)} from the config widths alone')
    return count


__all__ = ['column_scores', 'unit_importance', 'select_units']
