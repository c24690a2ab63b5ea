"""Named size bounds of fixed-shape (static) models and the overflow rule.

A static model pads every data-dependent tensor to a bound from its config, e.g.::

    bounds = dict(max_points=120000, max_voxels=[60000, 30000, 15000], max_fg_points=[4096, 1024, 1024],
                  max_clusters=512, max_boxes=256)

Values are positive ints or lists of them (one per UNet level, per class, ...). When a needed size exceeds
its bound, eager mode raises :class:`BoundExceededError` naming the bound, the needed and the allowed size;
while tracing/exporting (:func:`is_exporting`) the caller truncates deterministically and the number dropped
is returned as a tensor (an output of the exported graph).
"""
import math
import numbers
from collections.abc import Mapping, Sequence

import torch

from fsdlite.ops import is_exporting


class BoundExceededError(RuntimeError):
    """A data-dependent size exceeded its configured bound (eager mode).

    Attributes:
        name (str): bound name, with ``[index]`` for list bounds (``'max_voxels[1]'``).
        needed (int): size the input needs.
        allowed (int): configured bound.
    """

    def __init__(self, name, needed, allowed):
        self.name, self.needed, self.allowed = name, int(needed), int(allowed)
        super().__init__(f'bound {name} exceeded: needed {self.needed}, allowed {self.allowed}; raise '
                         f'bounds.{name.split("[")[0]} in the config (tools/collect_bounds.py measures bounds on a '
                         f'dataset)')


def check_bound(needed, allowed, name, strict=None):
    """Check a needed size against its bound.

    Args:
        needed (int | Tensor): the size needed (0-d integer tensor allowed: read on the host in eager mode).
        allowed (int): the bound.
        name (str): bound name used in the error (``'max_voxels[0]'``).
        strict (bool | None): raise on overflow; default ``not is_exporting()``.
    Returns:
        Tensor: () int64 number of items that do not fit (``max(needed - allowed, 0)``); always 0 when strict.
    Raises:
        BoundExceededError: strict and ``needed > allowed``.
    """
    allowed = int(allowed)
    strict = not is_exporting() if strict is None else strict
    device = needed.device if isinstance(needed, torch.Tensor) else None
    if strict:
        value = int(needed)
        if value > allowed:
            raise BoundExceededError(name, value, allowed)
        return torch.zeros((), dtype=torch.long, device=device)
    if isinstance(needed, torch.Tensor):
        return (needed.to(torch.long) - allowed).clamp(min=0).reshape(())
    return torch.tensor(max(int(needed) - allowed, 0), dtype=torch.long)


def _bound_value(name, value):
    def positive(v):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f'bounds.{name} must be a positive int or a list of positive ints, got {value!r}')
        return int(v)

    if isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            raise ValueError(f'bounds.{name} must not be an empty list')
        return tuple(positive(v) for v in value)
    return positive(value)


class Bounds(Mapping):
    """Named integer bounds (read-only mapping ``name -> int | tuple[int, ...]``).

    Args:
        **bounds: ``name=int`` or ``name=[int, ...]`` (per level / per class), all >= 1.

    Example::

        b = Bounds.from_cfg(dict(max_points=1000, max_voxels=[800, 400]))
        b.get('max_voxels', 1)                         # 400
        dropped = b.check('max_voxels', needed, 1)     # raises BoundExceededError in eager mode
    """

    def __init__(self, **bounds):
        self._bounds = {str(k): _bound_value(k, v) for k, v in bounds.items()}

    @classmethod
    def from_cfg(cls, cfg):
        """Build from ``None`` (no bounds), a dict (config) or a Bounds (returned as is)."""
        if cfg is None:
            return cls()
        if isinstance(cfg, Bounds):
            return cfg
        if not isinstance(cfg, Mapping):
            raise TypeError(f'bounds must be a dict of name -> int or list of ints, got {type(cfg).__name__}')
        return cls(**dict(cfg))

    def __getitem__(self, name):
        if name not in self._bounds:
            raise KeyError(f'bounds has no {name!r}; the config defines {sorted(self._bounds)}')
        return self._bounds[name]

    def __iter__(self):
        return iter(self._bounds)

    def __len__(self):
        return len(self._bounds)

    def get(self, name, index=None):
        """The bound ``name`` (int), or entry ``index`` of a list bound.

        A scalar bound is returned for any ``index`` (shared by every level/class); a list bound needs an
        index inside the list.
        """
        value = self[name]
        if isinstance(value, tuple):
            if index is None:
                raise ValueError(f'bounds.{name} is a list {list(value)}; pass the index (level / class)')
            if not 0 <= int(index) < len(value):
                raise IndexError(f'bounds.{name} has {len(value)} entries {list(value)}, got index {index}')
            return value[int(index)]
        return value

    def label(self, name, index=None):
        """Display name of a bound entry: ``'max_voxels[1]'`` for list bounds, else ``name``."""
        return f'{name}[{index}]' if isinstance(self[name], tuple) else name

    def check(self, name, needed, index=None, strict=None):
        """:func:`check_bound` of ``needed`` against ``get(name, index)``; returns the dropped count tensor."""
        return check_bound(needed, self.get(name, index), self.label(name, index), strict=strict)

    def to_dict(self):
        """Plain dict (lists for list bounds), e.g. for a config snippet or deploy.json."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._bounds.items()}

    def __repr__(self):
        return f'Bounds({", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())})'


def merge_max(acc, needed):
    """Elementwise maximum of ``name -> int | list[int]`` dicts (updates and returns ``acc``)."""
    for key, value in needed.items():
        old = acc.get(key)
        if old is None:
            acc[key] = list(value) if isinstance(value, (list, tuple)) else value
        elif isinstance(value, (list, tuple)):
            acc[key] = [max(a, b) for a, b in zip(old, value)]
        else:
            acc[key] = max(old, value)
    return acc


def scale_bounds(bounds, factor, names=None):
    """A new ``name -> int | list[int]`` dict with the entries named in ``names`` (default: all; absent names are
    skipped) times ``factor``, rounded up (within 1e-9) and at least 1; the other entries are copied."""
    def scale(v):
        return max(int(math.ceil(int(v) * factor - 1e-9)), 1)

    out = dict(bounds)
    for key in (out if names is None else [n for n in names if n in out]):
        value = out[key]
        out[key] = [scale(v) for v in value] if isinstance(value, (list, tuple)) else scale(value)
    return out


__all__ = ['BoundExceededError', 'Bounds', 'check_bound', 'is_exporting', 'merge_max', 'scale_bounds']
