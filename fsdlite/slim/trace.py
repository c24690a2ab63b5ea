"""Derive channel dependencies from a model by tracing one forward pass on a sample input.

Every floating-point tensor gets a *shadow*: an int64 tensor of channel labels of the same shape
(:mod:`fsdlite.slim.labels`). A ``TorchDispatchMode`` updates the shadows op by op
(:mod:`fsdlite.slim.rules`), so labels follow values through views, concatenations, gathers, residual
sums, grouped reshapes, scatters and custom ops. Layers with a :class:`~fsdlite.slim.specs.SlimSpec` are
handled at module level by forward hooks:

* a producer (Linear, sparse conv, KPConv) reads the labels of each input column (the channels that column
  is made of: they are joined into one *unit*) and gives its output columns fresh nodes;
* a channel-wise layer (norms) gives each column a node joined with its input column;
* a ``'params'`` spec labels the declared dimensions of a module's own parameters before the forward.

Parameters without a spec that are used outside such layers get one *frozen* label each (an unknown
parametrised computation can only block slimming). Nothing about a model family is hard-coded here.
"""
import collections
from dataclasses import dataclass, field
from typing import List

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fsdlite.models.layers.bn_fold import layer_by_layer

from . import custom_rules  # noqa: F401  (registers the fsdlite op rules)
from .labels import LabelStore
from .rules import is_float, rule_for
from .specs import resolve_param, spec_for

LABEL_ATTR = '_fsdlite_slim_label'


class TraceError(RuntimeError):
    """The sample forward could not be traced (names the layer or op and the reason)."""


@dataclass
class LeafRecord:
    """What the trace learned about one layer with a spec."""

    name: str
    module: torch.nn.Module
    spec: object
    order: int = -1                                    # first call position among leaves
    calls: int = 0
    nonempty_calls: int = 0
    in_labels: List[list] = field(default_factory=list)   # per call: label of each input column
    out_nodes: list = None                             # producer: label of each output column
    chan_nodes: list = None                            # channel-wise: label of each column
    param_nodes: dict = field(default_factory=dict)    # 'params' spec: name -> labels along its dim


class ChannelTracer(TorchDispatchMode):
    """Dispatch mode + hooks that label channels (see the module docstring). Use :func:`trace_channels`."""

    def __init__(self):
        super().__init__()
        self.store = LabelStore()
        self.leaves = {}
        self.paused = 0
        self._stack = []
        self._order = 0
        self.conservative = collections.Counter()
        self.output_labels = set()   # label ids found in the model's outputs
        self._labelled = []

    # ------------------------------------------------------------------ shadows
    def label(self, t, create=True):
        """Label tensor of ``t`` (zeros created on first use), None for non-float tensors."""
        if not is_float(t):
            return None
        lab = t.__dict__.get(LABEL_ATTR)
        if lab is None and create:
            lab = torch.zeros(t.shape, dtype=torch.int64)
            self.set_label(t, lab)
        return lab

    def set_label(self, t, lab):
        """Attach label tensor ``lab`` (same shape, int64; None: zeros = no channel) to ``t``.

        Raises:
            TraceError: the shapes differ.
        """
        if lab is None:
            lab = torch.zeros(t.shape, dtype=torch.int64)
        if tuple(lab.shape) != tuple(t.shape):
            raise TraceError(f'internal: label shape {tuple(lab.shape)} != tensor shape {tuple(t.shape)}')
        setattr(t, LABEL_ATTR, lab)

    def _persistent(self, t, lab):
        self.set_label(t, lab)
        self._labelled.append(t)

    # ------------------------------------------------------------------ dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        try:
            rule_for(func)(self, func, args, kwargs, out)
        except TraceError:
            raise
        except Exception as exc:  # name the op: a rule bug must not look like a model bug
            raise TraceError(f'channel tracing failed at {func}: {type(exc).__name__}: {exc}') from exc
        return out

    # ------------------------------------------------------------------ leaves
    def _columns(self, t, dim):
        """(C,) union of each column's labels over all other dims; None for an empty tensor."""
        lab = self.label(t).movedim(dim, -1)
        rows = lab.reshape(-1, lab.shape[-1])
        if rows.shape[0] == 0:
            return None
        return self.store.reduce_rows(rows.t().contiguous())[0].tolist()

    def _broadcast(self, labels, t, dim):
        shape = [1] * t.dim()
        shape[dim] = len(labels)
        return torch.tensor(labels, dtype=torch.int64).view(shape).expand(t.shape).contiguous()

    def pre_hook(self, rec):
        """Pre-hook of layer ``rec``: notes whether it runs inside an opaque layer; opaque specs pause tracing."""
        def hook(module, args, kwargs):
            nested = self.paused > 0
            self._stack.append(nested)
            if rec.spec.opaque:
                self.paused += 1
        return hook

    def post_hook(self, rec):
        """Hook of layer ``rec``: labels the call's input / output channels (skipped inside an opaque layer)."""
        def hook(module, args, kwargs, output):
            if rec.spec.opaque:
                self.paused -= 1
            if self._stack.pop():
                return
            try:
                self._leaf(rec, args, kwargs, output)
            except TraceError:
                raise
            except Exception as exc:
                raise TraceError(f'channel tracing failed in layer {rec.name!r} '
                                 f'({type(module).__name__}): {type(exc).__name__}: {exc}') from exc
        return hook

    def _leaf(self, rec, args, kwargs, output):
        spec = rec.spec
        x, y = spec.input_features(args, kwargs), spec.output_features(output)
        if x is None or y is None or not is_float(x) or not is_float(y):
            raise TraceError(f'layer {rec.name!r} ({type(rec.module).__name__}): its slim spec expects tensor '
                             f'features as forward argument {spec.input_arg} and as output')
        if rec.order < 0:
            rec.order, self._order = self._order, self._order + 1
        rec.calls += 1
        in_dim = spec.channel_dim % x.dim() if spec.kind == 'channelwise' else x.dim() - 1
        cols = self._columns(x, in_dim)
        if cols is not None:
            rec.nonempty_calls += 1
            rec.in_labels.append(cols)
            for lab in cols:
                self.store.commit(lab)
        if spec.kind == 'producer':
            if rec.out_nodes is None:
                rec.out_nodes = self.store.new_nodes(y.shape[-1], (rec.name, 'out'))
            self.set_label(y, self._broadcast(rec.out_nodes, y, y.dim() - 1))
        else:
            if rec.chan_nodes is None:
                rec.chan_nodes = self.store.new_nodes(x.shape[in_dim], (rec.name, 'chan'))
            if cols is not None:
                for node, lab in zip(rec.chan_nodes, cols):
                    self.store.commit(self.store.union((node, lab)))
            out_dim = spec.channel_dim % y.dim()
            self.set_label(y, self._broadcast(rec.chan_nodes, y, out_dim))

    # ------------------------------------------------------------------ set-up / tear-down
    def attach(self, model):
        """Register hooks on every layer with a spec and label parameters; returns the hook handles."""
        handles = []
        covered = set()
        for name, module in model.named_modules():
            spec = spec_for(module)
            if spec is None:
                continue
            rec = LeafRecord(name, module, spec)
            self.leaves[name] = rec
            if spec.kind == 'params':
                for pname, dim in spec.params.items():
                    p = resolve_param(module, pname)
                    if p is None:
                        continue
                    labels = self.store.new_nodes(p.shape[dim], (name, f'param:{pname}'))
                    rec.param_nodes[pname] = labels
                    self._persistent(p, self._broadcast(labels, p, dim))
                    covered.add(id(p))
                continue
            handles.append(module.register_forward_pre_hook(self.pre_hook(rec), with_kwargs=True))
            handles.append(module.register_forward_hook(self.post_hook(rec), with_kwargs=True))
        for pname, p in list(model.named_parameters()) + list(model.named_buffers()):
            if id(p) in covered or not is_float(p) or p.numel() <= 1:
                continue
            (label,) = self.store.new_nodes(1, (pname, 'frozen-param'))
            self.store.freeze(label)
            self._persistent(p, torch.full((1,) * p.dim(), label, dtype=torch.int64).expand(p.shape))
        return handles

    def collect_outputs(self, obj, seen=None):
        """Record the labels of every float tensor in the forward's output (a nested structure)."""
        seen = set() if seen is None else seen
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            lab = self.label(obj, create=False)
            if lab is not None and lab.numel():
                self.output_labels.update(int(x) for x in torch.unique(lab).tolist() if x)
        elif isinstance(obj, dict):
            for v in obj.values():
                self.collect_outputs(v, seen)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                self.collect_outputs(v, seen)

    def detach(self, handles):
        """Remove the hook ``handles`` and the labels attached to parameters and buffers."""
        for h in handles:
            h.remove()
        for t in self._labelled:
            t.__dict__.pop(LABEL_ATTR, None)
        self._labelled.clear()


def strip_labels(obj, seen=None):
    """Remove label shadows from tensors in a (nested) data structure (inputs of the traced forward)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        obj.__dict__.pop(LABEL_ATTR, None)
    elif isinstance(obj, dict):
        for v in obj.values():
            strip_labels(v, seen)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            strip_labels(v, seen)
    elif hasattr(obj, '__dict__') and not isinstance(obj, torch.nn.Module):
        for v in vars(obj).values():
            strip_labels(v, seen)


def trace_channels(model, data, mode='tensor'):
    """Trace ``model(**data, mode=mode)`` (eval mode, no grad) and return the :class:`ChannelTracer`.

    Models are traced on their dynamic path (the fixed-shape forward's rulebook convs read the sparse-conv weights
    functionally, which the layer hooks would see as unknown parameter use); for the same reason layers that read a gathered concatenation split
    (``LinearNormAct.forward_gathered_concat``) are traced on the concatenation (:func:`layer_by_layer`).

    Args:
        model (nn.Module): an mmengine BaseModel (or any module taking ``inputs, data_samples, mode``).
        data (dict): the data preprocessor's output (``inputs``, ``data_samples``).
        mode (str): forward mode; 'tensor' returns the raw head outputs.
    Raises:
        TraceError: an op or layer could not be traced, or a layer received no data on the sample.
    """
    tracer = ChannelTracer()
    was_training = model.training
    model.eval()
    handles = tracer.attach(model)
    try:
        with torch.no_grad(), layer_by_layer(), tracer:
            output = model(**data, mode=mode)
        tracer.collect_outputs(output)
    finally:
        tracer.detach(handles)
        strip_labels(data)
        model.train(was_training)
    starved = [r.name for r in tracer.leaves.values()
               if r.spec.opaque and r.calls and not r.nonempty_calls]
    if starved:
        raise TraceError(f'the sample input reached layers {starved} with no rows (e.g. no foreground points '
                         'or instances), so their channel dependencies cannot be traced; pick a sample that '
                         'exercises the whole model (another --sample-index, or a frame with objects)')
    return tracer


__all__ = ['ChannelTracer', 'LeafRecord', 'TraceError', 'trace_channels', 'strip_labels', 'LABEL_ATTR']
