"""KPConv family: kernel points, KPConv/KPConvD/KPConvX/KPInv layers, blocks, KPCNN/KPFCNN.

Every submodule is imported so its registered components are visible.  The fused ops
(``fsdlite.ops.kpconv`` / ``kp_aggregate``) build on the first call of one of their ops.
"""
from ...utils.imports import import_submodules

import_submodules(__name__, __path__)
