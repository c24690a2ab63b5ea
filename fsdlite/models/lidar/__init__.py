"""The sparse lidar segmentation network, shared by the segmentor and FSD's first stage: the data preprocessor
(voxel hashing), the dynamic VFE, the sparse UNet, the voxel-to-point neck, the point segmentation head and the
``SparseSegmentor`` that chains them.

Every submodule is imported so its registered components are visible to the registries.
"""
from fsdlite.utils.imports import import_submodules

from .data_preprocessor import LidarDataPreprocessor
from .dynamic_vfe import DynamicVFE
from .point_seg_head import PointSegHead
from .sparse_segmentor import SparseSegmentor
from .sparse_unet import SparseUNet
from .voxel2point_neck import Voxel2PointNeck

import_submodules(__name__, __path__)

__all__ = ['LidarDataPreprocessor', 'DynamicVFE', 'PointSegHead', 'SparseSegmentor', 'SparseUNet', 'Voxel2PointNeck']
