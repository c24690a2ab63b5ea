"""FSD-lite / FSDv2-lite: the detectors (``fsd_lite``, ``fsdv2_lite``, their shared ``detector_base`` and the
fixed-shape mode in ``static``) and their components: vote segmentation head, foreground sampling, grouping, SIR
instance features, cluster box head, box coder, virtual points and the virtual-voxel mixer. The first stage (VFE,
sparse UNet, neck) comes from :mod:`fsdlite.models.lidar`.

Every submodule is imported so its registered components are visible to the registries.
"""
from ...utils.imports import import_submodules

import_submodules(__name__, __path__)
