"""The bounds a fixed-shape model needs, declared once (a schema) and read by everything that handles bounds.

A model lists its bounds as :class:`BoundSpec` entries in a :class:`BoundSchema` (``model.bound_schema()``); the
config's ``bounds`` are checked against it (:meth:`BoundSchema.normalize`), and the deploy code derives from it the
names of the pre-ops' and the graph's ``dropped`` counts, the bounds a capacity tier scales and how each bound is
measured (``fsdlite.deploy.bound_measure``).  Example (FSD-lite)::

    BoundSchema('FSDLite', (
        BoundSpec('max_points', stage='pre'),
        BoundSpec('max_voxels', 3, stage='pre', unet='backbone'),
        BoundSpec('max_pairs', 5, stage='pre', optional=True, pairs_of='max_voxels'),
        BoundSpec('max_fg_points', 3), BoundSpec('max_clusters'), BoundSpec('max_cc_iters'), BoundSpec('max_boxes')))
"""
from typing import NamedTuple, Optional

from .bounds import Bounds

STAGES = ('pre', 'graph')


class BoundSpec(NamedTuple):
    """One bound of a fixed-shape model.

    Attributes:
        name (str): the config key (``max_voxels``).
        entries (int | None): None for one int; n for a list of n ints (per UNet level, class or pair slot).
        stage (str): ``'pre'``, decided by the eager pre-ops before the graph runs (every capacity tier scales it),
            or ``'graph'``, counted in the fixed-shape forward's ``dropped`` output.
        optional (bool): may be left out of the config (it switches a feature on, e.g. pair lists).
        tier_scaled (bool): a graph bound a deploy capacity tier scales with its pre-op bounds (its use follows the
            input's size); a tier whose graph drops items in one is not taken.
        unet (str | None): attribute of the ``SparseUNet`` whose level voxels the bound covers.
        pairs_of (str | None): the level bound (a spec with ``unet``) whose UNet's rulebook pairs it bounds.
    """

    name: str
    entries: Optional[int] = None
    stage: str = 'graph'
    optional: bool = False
    tier_scaled: bool = False
    unet: Optional[str] = None
    pairs_of: Optional[str] = None

    def labels(self):
        """Names of the entries: ``[name]`` for one int, ``[name[0], name[1], ...]`` for a list."""
        return [self.name] if self.entries is None else [f'{self.name}[{i}]' for i in range(self.entries)]


class BoundSchema:
    """The ordered bounds of one model (see the module docstring).

    Args:
        owner (str): the model's type name, used in errors.
        specs (iterable of BoundSpec): in the order of the ``dropped`` counts (pre-ops, then the graph).
    """

    def __init__(self, owner, specs):
        self.owner, self.specs = str(owner), tuple(specs)
        names = [s.name for s in self.specs]
        if len(set(names)) != len(names):
            raise ValueError(f'{owner}: bound names repeat in {names}')
        for spec in self.specs:
            if spec.stage not in STAGES:
                raise ValueError(f'{owner}: bound {spec.name} has stage {spec.stage!r}, expected one of {STAGES}')
            if spec.pairs_of is not None and self[spec.pairs_of].unet is None:
                raise ValueError(f'{owner}: bound {spec.name} counts the pairs of {spec.pairs_of}, which bounds no '
                                 'UNet')

    def __getitem__(self, name):
        for spec in self.specs:
            if spec.name == name:
                return spec
        raise KeyError(f'{self.owner} has no bound {name!r}; its bounds are {[s.name for s in self.specs]}')

    def __iter__(self):
        return iter(self.specs)

    def required(self):
        """``name -> entries`` of the bounds every config must give."""
        return {s.name: s.entries for s in self.specs if not s.optional}

    def optional(self):
        """``name -> entries`` of the bounds a config may give."""
        return {s.name: s.entries for s in self.specs if s.optional}

    def present(self, bounds, stage=None):
        """The specs of ``stage`` (default: every stage) that ``bounds`` define, in schema order."""
        return [s for s in self.specs if s.name in bounds and stage in (None, s.stage)]

    def dropped_names(self, bounds, stage):
        """Names of the ``dropped`` counts of ``stage`` (``'pre'``: the pre-ops, ``'graph'``: the fixed-shape
        forward) for a model with ``bounds``: every entry of every bound of that stage present, in order."""
        return [label for s in self.present(bounds, stage) for label in s.labels()]

    def tier_scaled(self, stage=None):
        """Names of the bounds a capacity tier scales (every pre-op bound and the graph bounds marked
        ``tier_scaled``), optionally only those of ``stage``."""
        return tuple(s.name for s in self.specs if (s.stage == 'pre' or s.tier_scaled) and stage in (None, s.stage))

    def normalize(self, cfg):
        """Check a config's ``bounds`` against the schema; returns :class:`~fsdlite.structures.bounds.Bounds`.

        Every required bound must be given and no unknown one; a list bound takes one int (shared by its entries)
        or exactly ``entries`` ints, a scalar bound one int.  Errors name the bound, the value and what was
        expected.
        """
        bounds, required, optional = Bounds.from_cfg(cfg), self.required(), self.optional()
        missing, unknown = sorted(set(required) - set(bounds)), sorted(set(bounds) - set(required) - set(optional))
        if missing or unknown:
            raise ValueError(f'{self.owner}: bounds must define exactly {sorted(required)} (optional: '
                             f'{sorted(optional)}); missing {missing}, unknown {unknown}')
        values = {}
        for spec in self.present(bounds):
            value = bounds[spec.name]
            if spec.entries is None and isinstance(value, tuple):
                raise ValueError(f'bounds.{spec.name} must be one int, got {list(value)}')
            if spec.entries is not None:
                value = value if isinstance(value, tuple) else (value,) * spec.entries
                if len(value) != spec.entries:
                    raise ValueError(f'bounds.{spec.name} needs {spec.entries} entries (one per UNet level / class / '
                                     f'pair slot), got {list(value)}')
            values[spec.name] = value
        return Bounds(**values)


__all__ = ['BoundSchema', 'BoundSpec', 'STAGES']
