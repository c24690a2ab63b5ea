"""FSD-lite / FSDv2-lite components: vote segmentation head, foreground sampling, grouping,
SIR instance features, cluster box head, box coder, virtual points and the virtual-voxel mixer.

Every submodule is imported so its registered components are visible to the registries.
"""
from ...utils.imports import import_submodules

import_submodules(__name__, __path__)
