"""Validation of configs and of ``--cfg-options`` overrides: a misspelt key (mmengine would silently add it) and
values mmengine would train with silently or fail on deep inside (a string learning rate, 0 classes, a validation
interval of 0)."""
import difflib
import math
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


class ConfigValueError(ToolError, ValueError):
    """A config entry has a value training cannot use."""


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_int(key, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigValueError(f'{key}={value!r}: expected an integer >= {minimum}')


OPTIMIZER_NUMBERS = ('lr', 'weight_decay', 'momentum', 'eps', 'dampening', 'alpha')


def check_config_values(cfg):
    """Raise :class:`ConfigValueError` for values training cannot use, naming the dotted key and what was expected:

    * ``train_cfg.max_iters`` / ``max_epochs`` / ``val_interval``: integers >= 1 (0 iterations would 'train' nothing
      and exit 0; a validation interval of 0 divides by zero after the first iteration);
    * ``optim_wrapper.optimizer``: ``lr``, ``weight_decay``, ``momentum``, ``eps`` ... finite numbers >= 0 and
      ``betas`` two numbers in [0, 1) (a string lr failed inside torch.optim with a TypeError);
    * every ``num_classes`` under ``model``: an integer >= 1 (0 classes failed in the loss of the first batch).

    Returns:
        the config.
    """
    train_cfg = cfg.get('train_cfg') or {}
    for key in ('max_iters', 'max_epochs', 'val_interval'):
        if train_cfg.get(key) is not None:
            _check_int(f'train_cfg.{key}', train_cfg[key])
    optimizer = (cfg.get('optim_wrapper') or {}).get('optimizer') or {}
    if isinstance(optimizer, Mapping):
        for key in OPTIMIZER_NUMBERS:
            if key in optimizer and not (_is_number(optimizer[key]) and optimizer[key] >= 0):
                raise ConfigValueError(f'optim_wrapper.optimizer.{key}={optimizer[key]!r}: expected a finite number '
                                       '>= 0')
        betas = optimizer.get('betas')
        if betas is not None and not (isinstance(betas, (list, tuple)) and len(betas) == 2 and
                                      all(_is_number(b) and 0 <= b < 1 for b in betas)):
            raise ConfigValueError(f'optim_wrapper.optimizer.betas={betas!r}: expected two numbers in [0, 1)')
    model = cfg.get('model')
    for key in config_keys(model or {}, 'model.'):
        if key.rsplit('.', 1)[-1] == 'num_classes':
            node = model
            for part in key.split('.')[1:]:
                node = node[int(part)] if isinstance(node, (list, tuple)) else node[part]
            if node is not None:
                _check_int(key, node)
    return cfg


__all__ = ['UnknownConfigKeyError', 'ConfigValueError', 'check_cfg_options', 'check_config_values', 'config_keys']
