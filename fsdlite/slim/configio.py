"""Reading the original checkpoint, writing the slimmed config (``_base_`` + overrides) and checkpoint."""
import os
import os.path as osp
import pprint

import torch

from fsdlite.engine.checkpoint import CheckpointMismatchError, load_state_strict, read_state_dict

from .errors import SlimError


def config_overrides(base, new):
    """Nested dict of what ``new`` changes in ``base`` (dicts recursively, anything else replaced whole)."""
    out = {}
    for key, value in new.items():
        old = base.get(key, _MISSING) if isinstance(base, dict) else _MISSING
        if isinstance(value, dict) and isinstance(old, dict):
            sub = config_overrides(old, value)
            if sub:
                out[key] = sub
        elif old is _MISSING or not _same(old, value):
            out[key] = value
    return out


_MISSING = object()


def _same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def write_slim_config(path, base_config, overrides, header=()):
    """Write a config that inherits ``base_config`` through ``_base_`` and applies ``overrides``.

    Args:
        path (str): output ``.py`` file.
        base_config (str): the original config file (referenced relative to ``path`` when possible).
        overrides (dict): top-level key -> value (nested dicts merge into the base, as mmengine does).
        header (Sequence[str]): comment lines.
    """
    base = osp.abspath(base_config)
    try:
        ref = osp.relpath(base, osp.dirname(osp.abspath(path)))
    except ValueError:  # another drive (Windows)
        ref = base
    lines = [f'# {h}' for h in header]
    lines.append(f'_base_ = [{ref!r}]')
    for key, value in overrides.items():
        lines.append(f'{key} = {pprint.pformat(value, width=110, sort_dicts=False)}')
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return path


def load_state_dict(path):
    """The state dict stored in a checkpoint file (mmengine's ``{'state_dict': ...}`` or a bare dict).

    Raises:
        FileNotFoundError, CheckpointLoadError: see :func:`fsdlite.engine.checkpoint.read_state_dict`.
        SlimError: the file holds no state dict.
    """
    try:
        return read_state_dict(path)[1]
    except CheckpointMismatchError as exc:
        raise SlimError(str(exc)) from None


def load_into(model, state, ckpt_path, config_path):
    """``model.load_state_dict(state, strict=True)`` with an error that names what does not match.

    Raises:
        SlimError: the checkpoint was trained with another config (missing/unexpected keys, other shapes).
    """
    try:
        return load_state_strict(model, state, ckpt_path, config_path)
    except CheckpointMismatchError as exc:
        raise SlimError(str(exc)) from None


def save_checkpoint(path, state_dict, meta):
    """Save ``{'meta': meta, 'state_dict': state_dict}`` (loadable by mmengine's ``load_from`` and tools/test.py)."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    torch.save({'meta': meta, 'state_dict': state_dict}, path)
    return path


__all__ = ['config_overrides', 'write_slim_config', 'load_state_dict', 'load_into', 'save_checkpoint']
