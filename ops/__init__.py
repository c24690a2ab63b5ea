"""fsdlite.ops: the in-repo C++/CUDA op library (depends on torch only).

Each op family lives in its own folder and compiles into its own library on first
use (see :mod:`fsdlite.ops.build`).  Public functions are imported lazily, so
``from fsdlite.ops import segment_reduce`` only builds the family it needs.
"""
import importlib

# public name -> op family (sub-package) that defines it
_EXPORTS = {
    'segment_reduce': 'segment_reduce',
    'segment_max': 'segment_reduce',
    'segment_min': 'segment_reduce',
}


def __getattr__(name):
    family = _EXPORTS.get(name)
    if family is None:
        raise AttributeError(f"module 'fsdlite.ops' has no attribute {name!r}")
    value = getattr(importlib.import_module(f'{__name__}.{family}'), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
