"""Depth reduction: drop the last blocks of a stage (kept blocks keep their weights).

A stage is named by its dotted model-config path: a per-stage tuple is truncated to its first N entries
(``backbone.encoder_channels.2=1``, ``sir.block_channels=2``), an int block count is set to N
(``backbone.blocks.3=1``). The blocks that disappear are found by rebuilding the model.

When a dropped block sat between two kept layers (a plain, non-residual stage), the kept consumer now
reads the dropped block's input: :func:`bridge_regions` joins the dropped block's input channels with its
output channels position by position, so the consumer keeps the weights of the same channel positions.
"""
from .entries import build_shapes, depth_paths, get_path, parse_path, set_path
from .errors import SlimError


def apply_depth(model_cfg, depth, base_shapes):
    """Apply ``{stage name: N}`` to ``model_cfg``.

    Returns:
        tuple: the new model config, a list of ``(stage name, removed parameter names)`` and ``{new name: old
        name}`` of layers that only change position (the output layer of a Sequential after dropped ones).
    Raises:
        SlimError: unknown stage name, N out of range, or a change that does not remove whole blocks.
    """
    cfg, regions, renames = model_cfg, [], {}
    for name, n in depth.items():
        path = parse_path(model_cfg, name)
        if path is None:
            raise SlimError(f'--depth: unknown stage {name!r}; stages of this config: '
                            f'{", ".join(depth_paths(model_cfg)) or "(none)"}')
        value = get_path(model_cfg, path)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SlimError(f'--depth {name}={n!r}: expected a positive number of blocks')
        if isinstance(value, (list, tuple)):
            if n >= len(value):
                raise SlimError(f'--depth {name}={n}: the stage has {len(value)} blocks, keep fewer than that')
            new = type(value)(value[:n])
        elif isinstance(value, int) and not isinstance(value, bool):
            if n >= value:
                raise SlimError(f'--depth {name}={n}: the stage has {value} blocks, keep fewer than that')
            new = n
        else:
            raise SlimError(f'--depth {name}: expected a per-stage tuple or a block count, found {value!r}')
        alone = set_path(model_cfg, path, new)
        try:
            shapes = build_shapes(alone)
        except Exception as exc:  # noqa: BLE001
            raise SlimError(f'--depth {name}={n}: the model does not build with {path_name_value(name, new)}: '
                            f'{type(exc).__name__}: {exc}') from exc
        removed = set(base_shapes) - set(shapes)
        added = set(shapes) - set(base_shapes)
        moved = _moved_layers(added, removed, shapes, base_shapes)
        added -= set(moved)
        removed -= set(moved.values())
        renames.update(moved)
        if added or not removed:
            raise SlimError(f'--depth {name}={n} does not drop whole blocks (new parameters: {sorted(added)[:5]}, '
                            f'removed: {len(removed)}); name a stage whose length is its number of blocks')
        regions.append((name, removed))
        cfg = set_path(cfg, path, new)
    return cfg, regions, renames


def _index_shift(old, new):
    """k > 0 when names ``old`` and ``new`` differ only in one integer component, old's larger by k; else 0."""
    a, b = old.split('.'), new.split('.')
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    if len(a) != len(b) or len(diff) != 1 or not (diff[0][0].isdigit() and diff[0][1].isdigit()):
        return 0
    return max(0, int(diff[0][0]) - int(diff[0][1]))


def _moved_layers(added, removed, shapes, base_shapes):
    """``{new name: old name}`` for parameters that only moved to a lower index with the same shape."""
    moved = {}
    for new in sorted(added):
        cands = [(_index_shift(old, new), old) for old in removed
                 if old not in moved.values() and base_shapes[old] == shapes[new] and _index_shift(old, new)]
        if cands:
            moved[new] = min(cands)[1]
    return moved


def path_name_value(name, value):
    """``'name=value'`` (value as ``repr``) for error messages."""
    return f'{name}={value!r}'


def dropped_leaves(graph, regions):
    """Names of traced layers whose parameters disappear with the dropped blocks."""
    leaves = set()
    for _, removed in regions:
        for pname in removed:
            leaves.update(d.leaf for d, _, _, _ in graph.by_param.get(pname, ()))
    return leaves


def bridge_regions(tracer, graph, regions, store):
    """Join, in ``store``, each dropped region's input channels with its output channels (same widths only).

    Returns:
        list: names of the stages that were bridged.
    """
    bridged = []
    for name, removed in regions:
        leaves = {d.leaf for p in removed for d, _, _, _ in graph.by_param.get(p, ())}
        producers = sorted((tracer.leaves[n] for n in leaves if tracer.leaves[n].spec.kind == 'producer'
                            and tracer.leaves[n].nonempty_calls), key=lambda r: r.order)
        if not producers:
            continue
        first, last = producers[0], producers[-1]
        width = len(first.in_labels[0])
        if width != len(last.out_nodes):
            continue
        entry = [store.union(call[c] for call in first.in_labels) for c in range(width)]
        store.commit_pairs(entry, last.out_nodes)
        bridged.append(name)
    return bridged


__all__ = ['apply_depth', 'dropped_leaves', 'bridge_regions']
