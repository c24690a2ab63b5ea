"""KPConv family: kernel points, KPConv/KPConvD/KPConvX/KPInv layers, blocks, KPCNN/KPFCNN.

Every submodule is imported so its registered components are visible.  The fused ops
(``fsdlite.ops.kpconv`` / ``kp_aggregate``) are imported lazily, on first use.
"""
from ...utils.imports import import_submodules

import_submodules(__name__, __path__)
