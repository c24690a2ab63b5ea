"""Reading the original checkpoint, writing the slimmed config (``_base_`` + overrides) and checkpoint."""
import os
import os.path as osp
import pprint

import torch

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
    """The state dict stored in a checkpoint file (mmengine's ``{'state_dict': ...}`` or a bare dict)."""
    if not osp.isfile(path):
        raise FileNotFoundError(f'checkpoint {path!r} does not exist')
    ckpt = torch.load(path, map_location='cpu', weights_only=False)
    state = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise SlimError(f'checkpoint {path!r} holds no state dict (expected a dict of tensors or '
                        '{"state_dict": ...})')
    return {k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()}


def load_into(model, state, ckpt_path, config_path):
    """``model.load_state_dict(state, strict=True)`` with an error that names what does not match.

    Raises:
        SlimError: the checkpoint was trained with another config (missing/unexpected keys, other shapes).
    """
    own = model.state_dict()
    shapes = sorted(f'{k}: checkpoint {tuple(state[k].shape)} vs config {tuple(own[k].shape)}'
                    for k in set(own) & set(state) if tuple(own[k].shape) != tuple(state[k].shape))
    missing, unexpected = [], []
    if not shapes:  # load non-strictly first: module hooks may fill keys that older checkpoints lack
        result = model.load_state_dict(state, strict=False)
        missing, unexpected = sorted(result.missing_keys), sorted(result.unexpected_keys)
    else:
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected or shapes:
        parts = []
        for what, items in (('missing', missing), ('unexpected', unexpected), ('different shapes', shapes)):
            if items:
                more = f' (+{len(items) - 5} more)' if len(items) > 5 else ''
                parts.append(f'{what}: {items[:5]}{more}')
        raise SlimError(f'checkpoint {ckpt_path!r} does not belong to config {config_path!r} ('
                        + '; '.join(parts) + ')')
    return model


def save_checkpoint(path, state_dict, meta):
    """Save ``{'meta': meta, 'state_dict': state_dict}`` (loadable by mmengine's ``load_from`` and tools/test.py)."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    torch.save({'meta': meta, 'state_dict': state_dict}, path)
    return path


__all__ = ['config_overrides', 'write_slim_config', 'load_state_dict', 'load_into', 'save_checkpoint']
