"""fsdlite.models.voxel_encoders: every submodule is imported so its registered components are visible."""
from fsdlite.utils.imports import import_submodules

from .dynamic_vfe import DynamicVFE

import_submodules(__name__, __path__)

__all__ = ['DynamicVFE']
