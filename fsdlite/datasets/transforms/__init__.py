"""Registered lidar data transforms; every submodule is imported so its components are visible.

Results-dict keys shared by the lidar datasets and these transforms (see :mod:`._fields`).
"""
from ...utils.imports import import_submodules

import_submodules(__name__, __path__)
