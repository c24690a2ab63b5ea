"""The one place that changes a config's training length: the schedule is rescaled with it, and the log says so.

``--cfg-options train_cfg.max_iters=N`` (or ``max_iters=N``, the config's own variable, which mmengine has
already substituted everywhere when the override arrives) goes through :func:`apply_max_iters_override` in
:func:`fsdlite.engine.tool_setup.load_config`, so every tool rescales the same way; ``tools/demo.py --max-iters``
and the slim fine-tune call :func:`rescale_schedule` directly.
"""
from mmengine.logging import print_log

from .errors import ToolError

SCALED_KEYS = ('begin', 'end', 'T_max')
#: iteration counts of custom hooks that follow the schedule's length: when the averaging of the weights starts
#: (mmengine's EMAHook asserts it starts before the run ends) and the foreground warm-up of the FSD detectors
HOOK_SCALED_KEYS = {'EMAHook': ('begin_iter',), 'FSDWarmupHook': ('enable_after_iter', 'buffer_iter')}


def _iterations(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolError(f'{name}={value!r}: expected an integer >= 1')
    return value


def _schedulers(cfg):
    schedulers = cfg.get('param_scheduler') or []
    return list(schedulers) if isinstance(schedulers, (list, tuple)) else [schedulers]


def rescale_schedule(cfg, max_iters, old=None, keep=(), log=True):
    """Run the config's schedule in ``max_iters`` iterations instead of ``old`` (default ``train_cfg.max_iters``).

    ``train_cfg.max_iters`` (and the top-level ``max_iters`` variable, where the config has one) become
    ``max_iters``; every iteration-based scheduler (``by_epoch=False``) has ``begin`` / ``end`` / ``T_max`` /
    ``milestones`` scaled by ``max_iters / old`` (rounded, at least 1 where it was not 0), so a warm-up and a cosine
    decay keep their shape. Epoch-based schedulers are left as they are. The iteration counts of the custom hooks in
    :data:`HOOK_SCALED_KEYS` (EMA start, foreground warm-up) are scaled the same way.

    Args:
        cfg (mmengine.Config): modified in place.
        max_iters (int): the new number of iterations, >= 1.
        old (int, optional): the length the schedule was written for.
        keep (Iterable[str]): dotted scheduler keys not to touch (``'param_scheduler.1.T_max'``: set explicitly).
        log (bool): print the change through mmengine's current logger.
    Returns:
        list[str]: one entry per changed entry, e.g. ``'param_scheduler.1 (CosineAnnealingLR) end 1000 -> 4, T_max
        1000 -> 4'`` or ``'custom_hooks.1 (EMAHook) begin_iter 300 -> 1'``.
    Raises:
        ToolError: ``max_iters`` (or ``old``) is not an integer >= 1.
    """
    max_iters = _iterations('train_cfg.max_iters', max_iters)
    old = _iterations('train_cfg.max_iters (before the override)',
                      old if old is not None else cfg.train_cfg.get('max_iters'))
    changes = [f'train_cfg.max_iters {old} -> {max_iters}'] if old != max_iters else []
    cfg.train_cfg.max_iters = max_iters
    if 'max_iters' in cfg:
        cfg.max_iters = max_iters

    def scaled(value):
        return max(1, round(value * max_iters / old)) if value else 0

    def scale_entry(entry, where, keys):
        done = []
        for key in keys:
            value = entry.get(key)
            if f'{where}.{key}' in keep or value is None:
                continue
            new = [scaled(m) for m in value] if key == 'milestones' else scaled(value) if isinstance(value, int) \
                else value
            if new != value:
                entry[key] = new
                done.append(f'{key} {value} -> {new}')
        if done:
            changes.append(f'{where} ({entry.get("type", "?")}) ' + ', '.join(done))

    for i, sched in enumerate(_schedulers(cfg)):
        if not isinstance(sched, dict) or sched.get('by_epoch', True) is not False:
            continue
        where = f'param_scheduler.{i}' if isinstance(cfg.get('param_scheduler'), (list, tuple)) else 'param_scheduler'
        scale_entry(sched, where, SCALED_KEYS + ('milestones',))
    for i, hook in enumerate(cfg.get('custom_hooks') or []):
        if isinstance(hook, dict) and hook.get('type') in HOOK_SCALED_KEYS:
            scale_entry(hook, f'custom_hooks.{i}', HOOK_SCALED_KEYS[hook['type']])
    if log and changes:
        print_log(f'schedule rescaled from {old} to {max_iters} iterations: ' + '; '.join(changes), logger='current')
    return changes


def apply_max_iters_override(cfg, options, old):
    """Rescale the schedule when ``--cfg-options`` set ``train_cfg.max_iters`` or ``max_iters``.

    Args:
        cfg (mmengine.Config): the config after the overrides were merged.
        options (Mapping): the parsed ``--cfg-options``.
        old (int | None): ``train_cfg.max_iters`` before the merge (None: not an iteration-based config).
    Returns:
        list[str]: the changes (empty when the options do not set the length).
    Raises:
        ToolError: both keys are given with different values, or the value is not an integer >= 1.
    """
    given = {key: options[key] for key in ('train_cfg.max_iters', 'max_iters') if key in options}
    if not given:
        return []
    if len(set(map(repr, given.values()))) > 1:
        raise ToolError(f'--cfg-options sets train_cfg.max_iters={given["train_cfg.max_iters"]!r} and '
                        f'max_iters={given["max_iters"]!r}; expected one of them (either rescales the schedule)')
    key, value = next(iter(given.items()))
    _iterations(key, value)
    if old is None:
        if key == 'max_iters':
            raise ToolError('--cfg-options max_iters: the config has no train_cfg.max_iters to set (not an '
                            'iteration-based schedule); expected a key of its train_cfg')
        return []
    keep = {k for k in options if k.startswith(('param_scheduler', 'custom_hooks'))}
    return rescale_schedule(cfg, value, old, keep)


__all__ = ['HOOK_SCALED_KEYS', 'rescale_schedule', 'apply_max_iters_override']
