"""The contract between a model family and the deploy pipeline (export, runtime, verification).

A :class:`DeployAdapter` wraps an eval-mode model (with its weights) and says, for one fixed batch size and
fixed bounds:

* which tensors the graph takes and returns (names, meanings) and the module that computes them
  (:meth:`~DeployAdapter.graph_module`, exported to ONNX and also run in PyTorch: the same math);
* the **pre-ops** (eager, ``fsdlite.ops``: voxel hashing, rulebooks, neighbour search, padding to the bounds)
  and **post-ops** (NMS, label decoding) that run outside the graph;
* how to run the original PyTorch model (dynamic/eager) on the same data and compare the results.

Adapters register under the model type names they serve (``cfg.model.type``) in the registry
:data:`fsdlite.registry.DEPLOY_ADAPTERS` (``@DEPLOY_ADAPTERS.register_module(['FSDLite', 'FSDv2Lite'])``; a plugin
registers its own the same way); :func:`adapter_class` looks one up.
"""
from typing import NamedTuple

import torch
from torch import nn

from ..models.layers.execution import fixed_shapes
from ..registry import DEPLOY_ADAPTERS
from .decisions import DecisionChecks


def adapter_class(model_type):
    """The adapter class of a model type name; raises a ValueError listing the supported types."""
    cls = DEPLOY_ADAPTERS.get(model_type)
    if cls is None:
        raise ValueError(f'no deploy adapter for model type {model_type!r}; supported: '
                         f'{sorted(DEPLOY_ADAPTERS.module_dict)}')
    return cls


class PreOpsResult(NamedTuple):
    """Output of the pre-ops: ``inputs`` (dict name -> Tensor in graph input order), ``context`` (what the
    post-ops need), ``dropped`` (dict bound name -> items the pre-ops dropped because a bound was exceeded)."""
    inputs: dict
    context: object
    dropped: dict


class Frame(NamedTuple):
    """A named verification input: ``name``, ``data`` (the family's raw input) and ``source`` (where it is from)."""
    name: str
    data: object
    source: str


class DeployAdapter:
    """Base class (see the module docstring).

    Args:
        model (nn.Module): the model in eval mode, with its weights; detectors already in fixed-shape mode.
        bounds (dict): the deploy bounds (family-specific names; stored in deploy.json).
        batch_size (int): B, a constant of the graph.
    """

    family = ''
    bounds_have_margin = True  #: measured bounds are scaled by a margin (False: they are exact input shapes)
    #: bounds capacity tiers scale (``fsdlite.deploy.tiers``): the ones the pre-ops decide, then those of
    #: ``tier_graph_bound_names``; empty: no tiers
    tier_bound_names = ()
    #: the in-graph bounds among ``tier_bound_names``: a tier whose graph drops items in one is not taken
    tier_graph_bound_names = ()

    def __init__(self, model, bounds, batch_size=1):
        if isinstance(batch_size, bool) or int(batch_size) < 1:
            raise ValueError(f'{type(self).__name__}: batch_size must be a positive int, got {batch_size!r}')
        self.model = model.eval()
        self.bounds = dict(bounds)
        self.batch_size = int(batch_size)

    # ------------------------------------------------------------------ building (exporter and runtime)
    @classmethod
    def prepare_config(cls, model_cfg, bounds):
        """Return the model config used for deploy (e.g. detectors get their ``bounds``)."""
        return dict(model_cfg)

    @classmethod
    def config_bounds(cls, cfg):
        """Bounds stated by the config (dict) or None."""
        return None

    @classmethod
    def measure_bounds(cls, model, frames, margin):
        """Bounds that cover ``frames`` with a ``margin`` factor (dict), measured with the eager model."""
        raise NotImplementedError

    @classmethod
    def frames(cls, cfg, model, batch_size, data_root=None):
        """Verification inputs (list of :class:`Frame`); the first one is the export example."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------- graph
    def input_meanings(self):
        """dict input name -> meaning, in graph input order."""
        raise NotImplementedError

    def output_meanings(self):
        """dict output name -> meaning, in graph output order."""
        raise NotImplementedError

    def graph_module(self):
        """nn.Module whose ``forward(*inputs)`` (graph input order) returns the outputs as a tuple."""
        raise NotImplementedError

    def export_context(self):
        """Context manager active while exporting: the fixed execution mode
        (:func:`~fsdlite.models.layers.execution.fixed_shapes`: dump-slot forms, e.g. the kernel-point layers'
        pure-torch ONNX formulation instead of fsdlite.ops)."""
        return fixed_shapes()

    def dropped_names(self):
        """Names of the entries of the graph's ``dropped`` output (empty when the graph has none)."""
        return []

    def outside_graph(self):
        """dict(pre_ops=[...], post_ops=[...]): what runs outside the graph, in words."""
        raise NotImplementedError

    def host_state(self):
        """JSON-serialisable state the pre/post-ops need besides the config (e.g. calibrated limits)."""
        return {}

    def load_host_state(self, state):
        """Apply :meth:`host_state` output (runtime side)."""

    # ----------------------------------------------------------------------------- running
    def prepare_input(self, data):
        """The part of the pre-ops that does not depend on the bounds (shared by the capacity tiers); its result
        is accepted by :meth:`pre_ops` and :meth:`may_fit` in place of the raw data.  Default: the data itself."""
        return data

    def may_fit(self, prepared):
        """False when :meth:`prepare_input`'s result certainly exceeds a pre-op bound (the tier is skipped without
        running its pre-ops).  Default: True."""
        return True

    def measure_needs(self, prepared):
        """:meth:`prepare_input`'s result with what the input needs measured (at this adapter's bounds, the
        largest), so that :meth:`may_fit` of smaller tiers is exact; called after a tier's pre-ops overflowed.
        Default: unchanged."""
        return prepared

    def pre_ops(self, data):
        """:class:`PreOpsResult` for one batch of raw data (or of :meth:`prepare_input`'s result)."""
        raise NotImplementedError

    def post_ops(self, outputs, pre):
        """Final predictions (list of data samples) from the graph outputs (dict) and the pre-ops result."""
        raise NotImplementedError

    def run_torch_graph(self, inputs):
        """The graph module in PyTorch on the pre-ops inputs: dict output name -> Tensor."""
        with torch.no_grad():
            outputs = self.graph_module()(*inputs.values())
        return dict(zip(self.output_meanings(), outputs))

    def reference(self, data):
        """Final predictions of the original PyTorch model (eager, dynamic shapes) on the same raw data."""
        raise NotImplementedError

    def eager(self, data):
        """The model's eager inference as users run it (its own default kernels), for latency comparisons; the
        same predictions as :meth:`reference` up to float rounding (default: :meth:`reference` itself)."""
        return self.reference(data)

    def compare_outputs(self, deployed, reference, pre):
        """list of :class:`~fsdlite.deploy.compare.OutputDiff`, one per output (valid rows only)."""
        raise NotImplementedError

    def compare_results(self, deployed, reference):
        """:class:`~fsdlite.deploy.compare.Match` of two lists of final predictions."""
        raise NotImplementedError

    # ----------------------------------------------------------------------------- verification
    #: graph outputs that hold detections before the post-ops (:meth:`graph_detections`); a failing one is
    #: explained by the detection decisions of :meth:`decision_checks`
    detection_outputs = ()
    #: box and score tolerance of a detection match when explaining differences (:mod:`fsdlite.deploy.decisions`)
    detection_atol = 1e-4

    def decision_checks(self):
        """The model's discrete decisions (:class:`~fsdlite.deploy.decisions.DecisionChecks`) that explain a
        difference when a quantity sat on its threshold (:mod:`fsdlite.deploy.decisions`).  Default: none."""
        return DecisionChecks()

    def graph_detections(self, outputs, side):
        """list of :class:`~fsdlite.deploy.decisions.Detection` held by the graph outputs (before the post-ops);
        only called for adapters with :attr:`detection_outputs`."""
        raise NotImplementedError

    def result_detections(self, results, side):
        """list of :class:`~fsdlite.deploy.decisions.Detection` of final predictions, or None when the family's
        results are not boxes (differences of its results are then never explained)."""
        return None

    def tier_overflow(self, outputs):
        """dict bound name -> items the graph dropped in a bound the tiers scale (``tier_graph_bound_names``), the
        non-zero entries only: a tier with any is not taken (the input runs on the next one)."""
        scaled = set(self.tier_graph_bound_names)
        return {name: n for name, n in self.graph_dropped(outputs).items() if n and name.split('[')[0] in scaled}

    def graph_dropped(self, outputs):
        """dict bound name -> items dropped inside the graph (from its ``dropped`` output)."""
        names = self.dropped_names()
        if not names:
            return {}
        return dict(zip(names, (int(v) for v in outputs['dropped'].reshape(-1).tolist())))


class GraphModule(nn.Module):
    """Base of the exported wrappers: holds the model as a submodule (parameters shared, not copied)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.eval()


__all__ = ['adapter_class', 'PreOpsResult', 'Frame', 'DeployAdapter', 'GraphModule']
