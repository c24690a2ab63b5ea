"""fsdlite.models.backbones: every submodule is imported so its registered components are visible."""
from fsdlite.utils.imports import import_submodules

from .sparse_unet import SparseUNet

import_submodules(__name__, __path__)

__all__ = ['SparseUNet']
