"""fsdlite.models.losses: every submodule is imported so its registered components are visible."""
from fsdlite.utils.imports import import_submodules

from .focal_loss import SigmoidFocalLoss

import_submodules(__name__, __path__)

__all__ = ['SigmoidFocalLoss']
