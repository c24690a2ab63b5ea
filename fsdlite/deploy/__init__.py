"""fsdlite.deploy: fixed-shape export of every model family to plain ONNX, and the runtime that runs it.

* :func:`~fsdlite.deploy.exporter.export_model` writes a deploy folder (model.onnx, deploy.json, config.py,
  report.md); ``deploy/export_onnx.py`` is its command line;
* :func:`~fsdlite.deploy.folding.fold_batch_norms`: the exporter folds eval-mode BatchNorms into the linear maps
  and sparse convs before them, in a copy of the graph module;
* :class:`~fsdlite.deploy.runtime.DeployedModel` chains pre-ops -> ONNX Runtime -> post-ops in one call;
* :mod:`~fsdlite.deploy.tiers`: optional capacity tiers, extra fixed-shape graphs at smaller pre-op bounds, the
  runtime running each input on the smallest that holds it;
* :mod:`~fsdlite.deploy.graph_checks` enforces standard ONNX ops, no data-dependent ops, static shapes;
* :func:`~fsdlite.deploy.verify.verify_deploy` compares a deploy folder with PyTorch (``deploy/verify_onnx.py``);
* :mod:`~fsdlite.deploy.tensorrt` builds a TensorRT engine where TensorRT and a GPU exist (``deploy/build_trt.py``);
* one adapter per model type (:mod:`.detector`, :mod:`.voxelnet`, :mod:`.kpconv`, :mod:`.kpcnn`) says what runs
  where; they register in :data:`fsdlite.registry.DEPLOY_ADAPTERS` when this package is imported (its
  ``locations``).

Layering: deploy imports models, never the reverse (tests/test_layering.py checks every package's imports).
"""
from . import detector, kpcnn, kpconv, voxelnet  # noqa: F401  (register the adapters)
from .adapter import DeployAdapter, Frame, PreOpsResult, adapter_class
from .compare import Match, OutputDiff
from .exporter import ExportResult, export_model, prepare
from .graph_checks import DeployGraphError, check_graph, require_deployable
from .onnx_io import OrtGraph, export_graph
from .runtime import DeployedModel, DeployOutput, read_deploy_info
from .verify import FrameCheck, format_checks, verify_deploy

__all__ = ['DeployAdapter', 'Frame', 'PreOpsResult', 'adapter_class', 'Match', 'OutputDiff',
           'ExportResult', 'export_model', 'prepare', 'DeployGraphError', 'check_graph', 'require_deployable',
           'OrtGraph', 'export_graph', 'DeployedModel', 'DeployOutput', 'read_deploy_info', 'FrameCheck',
           'format_checks', 'verify_deploy']
