"""VoxelNet: muon-tomography graph network (GravNet muon stage -> attention collapse -> voxel stage -> head)."""
from ...utils.imports import import_submodules

import_submodules(__name__, __path__)
