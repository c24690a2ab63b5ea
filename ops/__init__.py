"""fsdlite.ops: the in-repo C++/CUDA op library (depends on torch only).

Each op family lives in its own folder and compiles into its own library on the first
call of one of its ops, never on import (see :mod:`fsdlite.ops.build`), so modules import
ops at the top.  Public functions are imported lazily: a family's ``__all__`` (read without
importing it) lists its exports, so ``from fsdlite.ops import segment_reduce`` imports only
the Python side of the family it needs.
"""
import ast
import importlib
import sys
import types
from pathlib import Path

from . import build  # noqa: F401  (makes torch.ops.fsdlite load a family on the first lookup of one of its ops)
from ._checks import is_exporting  # noqa: F401  (public: whether host reads are allowed now)


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


class _OpsModule(types.ModuleType):
    """Keeps ``fsdlite.ops.<name>`` bound to the function when a family folder has the same name.

    Importing ``fsdlite.ops.<family>`` makes the import system bind the submodule as an attribute
    of this package, which would shadow an export of the same name (``segment_reduce``).
    """

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _OpsModule


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
