"""Validation of ``--cfg-options`` overrides (mmengine would silently add a misspelt key)."""
import difflib
from collections.abc import Mapping

from .errors import ToolError


class UnknownConfigKeyError(ToolError, ValueError):
    """A ``--cfg-options`` key does not exist in the config."""


def _children(node):
    if isinstance(node, Mapping):
        return [(str(k), v) for k, v in node.items()]
    if isinstance(node, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(node)]
    return []


def config_keys(cfg, prefix=''):
    """Every dotted key of a (nested) config: dict keys and list indices, e.g. ``model.backbone.type``."""
    keys = []
    for name, value in _children(cfg):
        key = f'{prefix}{name}'
        keys.append(key)
        keys.extend(config_keys(value, key + '.'))
    return keys


def _lookup(cfg, key):
    """Return the deepest existing prefix of ``key`` and whether the full key exists."""
    node = cfg
    parts = key.split('.')
    for depth, part in enumerate(parts):
        children = dict(_children(node))
        if part not in children:
            return '.'.join(parts[:depth]), False
        node = children[part]
    return key, True


def check_cfg_options(cfg, options, allow_new_keys=False):
    """Raise :class:`UnknownConfigKeyError` for an override key that the config does not have.

    Args:
        cfg (Mapping): the loaded config (``mmengine.Config`` or dict).
        options (Mapping | None): parsed ``--cfg-options`` (dotted keys -> values).
        allow_new_keys (bool): accept keys that do not exist yet (mmengine's default behaviour).
    Raises:
        UnknownConfigKeyError: names the key, the part that exists, and close existing keys.
    """
    if not options or allow_new_keys:
        return
    if hasattr(cfg, 'to_dict'):  # mmengine.Config
        cfg = cfg.to_dict()
    known = None
    for key in options:
        if key.endswith('._delete_'):
            key = key[:-len('._delete_')]
        found, exists = _lookup(cfg, key)
        if exists:
            continue
        known = known if known is not None else config_keys(cfg)
        close = difflib.get_close_matches(key, known, n=5, cutoff=0.6)
        hint = f' Did you mean: {", ".join(close)}?' if close else ''
        where = f"'{found}' exists but has no '{key[len(found) + 1:] if found else key}'" if found else \
            f"no top-level key '{key.split('.')[0]}'"
        raise UnknownConfigKeyError(
            f'--cfg-options key {key!r} is not in the config ({where}).{hint} '
            'Pass --allow-new-cfg-keys to add new keys on purpose.')


__all__ = ['UnknownConfigKeyError', 'check_cfg_options', 'config_keys']
