"""fsdlite: registry-driven sparse 3D networks that train on CPU and export to fixed-shape ONNX.

The package import is light (``fsdlite.ops`` depends on torch only).  Compatibility
shims live in :mod:`fsdlite.utils.compat`: the mmengine checkpoint fix is applied by
:mod:`fsdlite.registry`, the spconv shims by :func:`fsdlite.utils.compat.import_spconv`,
the only way fsdlite imports spconv.
"""
__version__ = '0.1.0'
