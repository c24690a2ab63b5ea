"""fsdlite.datasets: every submodule is imported so its registered components are visible."""
from ..utils.imports import import_submodules

import_submodules(__name__, __path__)
