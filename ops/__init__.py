"""fsdlite.ops: the in-repo C++/CUDA op library (depends on torch only).

Each op family lives in its own folder and compiles into its own library on first
use (see :mod:`fsdlite.ops.build`).  Public functions are imported lazily: a family's
``__all__`` (read without importing it) lists its exports, so
``from fsdlite.ops import segment_reduce`` only builds the family it needs.
"""
import ast
import importlib
from pathlib import Path


def _discover_exports():
    exports = {}
    for init in sorted(Path(__file__).resolve().parent.glob('*/__init__.py')):
        family = init.parent.name
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, 'id', None) == '__all__' for t in node.targets):
                for name in ast.literal_eval(node.value):
                    exports[name] = family
    return exports


_EXPORTS = _discover_exports()


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
