"""fsdlite.models.necks: every submodule is imported so its registered components are visible."""
from fsdlite.utils.imports import import_submodules

from .voxel2point_neck import Voxel2PointNeck

import_submodules(__name__, __path__)

__all__ = ['Voxel2PointNeck']
