"""fsdlite.models.heads: every submodule is imported so its registered components are visible."""
from fsdlite.utils.imports import import_submodules

from .point_seg_head import PointSegHead

import_submodules(__name__, __path__)

__all__ = ['PointSegHead']
