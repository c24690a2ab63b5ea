"""fsdlite.models.data_preprocessors: every submodule is imported so its registered components are visible."""
from fsdlite.utils.imports import import_submodules

from .lidar_data_preprocessor import LidarDataPreprocessor

import_submodules(__name__, __path__)

__all__ = ['LidarDataPreprocessor']
