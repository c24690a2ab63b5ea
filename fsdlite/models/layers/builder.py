"""Build registered modules with defaults that a composite model shares among its parts."""
import copy
import inspect

from torch import nn

from fsdlite.registry import MODELS


def accepted_defaults(cls, defaults):
    """The subset of ``defaults`` that ``cls.__init__`` accepts (all of them if it takes ``**kwargs``)."""
    params = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(defaults)
    names = {p.name for p in params}
    return {k: v for k, v in defaults.items() if k in names}


def build_module(cfg, **defaults):
    """Build ``cfg`` from :data:`fsdlite.registry.MODELS`, filling missing arguments from ``defaults``.

    A default is used only when ``cfg`` does not set it and the class's constructor accepts it, so a
    composite model can share e.g. its voxel grid and chain channel counts (``in_channels`` of a part =
    ``out_channels`` of the previous one) without repeating them in every config entry.

    Args:
        cfg (dict | nn.Module): config with ``type`` (str or class), or an already built module.
        **defaults: candidate constructor arguments.
    Returns:
        nn.Module
    """
    if isinstance(cfg, nn.Module):
        return cfg
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'expected a config dict with a "type" key (or a module), got {cfg!r}')
    cfg = copy.deepcopy(dict(cfg))
    cls = cfg['type'] if inspect.isclass(cfg['type']) else MODELS.get(cfg['type'])
    if cls is None:  # let the registry raise its error with suggestions
        return MODELS.build(cfg)
    for key, value in accepted_defaults(cls, defaults).items():
        cfg.setdefault(key, value)
    return MODELS.build(cfg)


__all__ = ['build_module', 'accepted_defaults']
