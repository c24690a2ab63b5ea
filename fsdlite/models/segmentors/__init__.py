"""fsdlite.models.segmentors: every submodule is imported so its registered components are visible."""
from fsdlite.utils.imports import import_submodules

from .sparse_segmentor import SparseSegmentor

import_submodules(__name__, __path__)

__all__ = ['SparseSegmentor']
