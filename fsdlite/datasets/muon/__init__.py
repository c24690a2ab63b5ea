"""Muon-tomography data: a vectorised cosmic-muon simulator and the registered volume dataset."""
from ...utils.imports import import_submodules

import_submodules(__name__, __path__)
