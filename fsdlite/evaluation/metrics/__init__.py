"""fsdlite.evaluation.metrics: every submodule is imported so its registered components are visible."""
from fsdlite.utils.imports import import_submodules

import_submodules(__name__, __path__)
