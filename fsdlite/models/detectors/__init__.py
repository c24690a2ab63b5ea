"""Detectors (FSD-lite, FSDv2-lite): every submodule is imported so its registrations are visible."""
from ...utils.imports import import_submodules

import_submodules(__name__, __path__)
