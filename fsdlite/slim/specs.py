"""How layers slim: declarative specs of the parameters that carry channels.

The tracer (:mod:`fsdlite.slim.trace`) derives *which* channels are coupled from the model itself; a spec
only says how one layer maps its parameters to channel dimensions. Three kinds:

* ``'producer'`` -- a layer with input channels and new output channels (Linear, sparse/KP convs):
  ``in_params`` / ``out_params`` map parameter names (relative to the module, nested names allowed) to
  the dimension indexed by input / output channels. The layer is opaque to the tracer (its internals are
  not traced); ``input_arg`` says which forward argument holds the input features.
* ``'channelwise'`` -- output channel c is input channel c (norms, per-channel affine layers): ``params``
  maps parameter/buffer names to their channel dimension; ``channel_dim`` is the channel axis of the input.
* ``'params'`` -- a module traced through whose own parameters carry channels (depthwise kernels used by a
  traced op): ``params`` maps names to their channel dimension. Not opaque.

Model classes declare a spec with a class attribute ``slim_spec = dict(kind=..., ...)`` (plain data, so a
model file never imports this engine). Classes of other libraries are registered here with
:func:`register_spec` (torch layers, spconv convolutions); plugins may call it too. Lookup follows the MRO.
"""
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional

from torch import nn

from ..models.layers.rulebook_conv import conv_geometry

KINDS = ('producer', 'channelwise', 'params')


def _features(obj):
    """The feature tensor of a forward argument/output: a tensor, or a sparse tensor's ``features`` (fsdlite's
    SparseTensor, spconv's SparseConvTensor)."""
    if obj is None:
        return None
    feats = getattr(obj, 'features', obj)
    return feats if hasattr(feats, 'shape') else None


@dataclass
class SlimSpec:
    """Validated slimming spec of a layer class (see the module docstring)."""

    kind: str
    in_params: Dict[str, int] = field(default_factory=dict)
    out_params: Dict[str, int] = field(default_factory=dict)
    params: Dict[str, int] = field(default_factory=dict)
    input_arg: int = 0
    channel_dim: int = -1
    #: optional ``(module) -> (in_dim_size, out_dim_size) or None``: the weight is used as a
    #: ``view(Cin, Cout)`` matrix (spconv's 1x1 path), so slicing happens on that view.
    matrix_view: Optional[Callable] = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f'slim spec kind must be one of {KINDS}, got {self.kind!r}')
        if self.kind == 'producer' and not (self.in_params and self.out_params):
            raise ValueError('a producer slim spec needs in_params and out_params')
        if self.kind != 'producer' and not self.params:
            raise ValueError(f'a {self.kind!r} slim spec needs params')

    @property
    def opaque(self):
        """Leaves whose internals are not traced (producers and channel-wise layers)."""
        return self.kind in ('producer', 'channelwise')

    def input_features(self, args, kwargs):
        """The (..., C_in) input tensor of a forward call (None if absent)."""
        if self.input_arg < len(args):
            return _features(args[self.input_arg])
        values = list(kwargs.values())
        idx = self.input_arg - len(args)
        return _features(values[idx]) if 0 <= idx < len(values) else None

    @staticmethod
    def output_features(output):
        """The (..., C_out) output tensor of a forward call."""
        return _features(output)


_REGISTRY = {}


def register_spec(cls_or_name, spec):
    """Declare how a layer class slims.

    Args:
        cls_or_name (type | str): the class, or its ``module.QualName`` (to avoid importing a heavy
            library just to register, e.g. ``'spconv.pytorch.conv.SparseConvolution'``).
        spec (SlimSpec | dict): the spec (a dict is passed to :class:`SlimSpec`).
    """
    key = cls_or_name if isinstance(cls_or_name, str) else f'{cls_or_name.__module__}.{cls_or_name.__qualname__}'
    _REGISTRY[key] = spec if isinstance(spec, SlimSpec) else SlimSpec(**spec)


def spec_for(module):
    """The :class:`SlimSpec` of ``module`` (class attribute ``slim_spec`` first, then the registry, by MRO)."""
    for cls in type(module).__mro__:
        declared = cls.__dict__.get('slim_spec')
        if declared is not None:
            return declared if isinstance(declared, SlimSpec) else SlimSpec(**declared)
        got = _REGISTRY.get(f'{cls.__module__}.{cls.__qualname__}')
        if got is not None:
            return got
    return None


def resolve_param(module, name):
    """The parameter/buffer ``name`` (dotted, relative to ``module``) or None when absent."""
    obj = module
    for part in name.split('.'):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _spconv_matrix_view(module):
    """spconv multiplies 1x1 (stride 1) kernels by ``weight.view(Cin, Cout)`` (no transpose)."""
    if conv_geometry(module).one_by_one:
        return int(module.in_channels), int(module.out_channels)
    return None


_SPARSE_CONV = dict(kind='producer', in_params={'weight': 4}, out_params={'weight': 0, 'bias': 0},
                    matrix_view=_spconv_matrix_view)
register_spec(nn.Linear, dict(kind='producer', in_params={'weight': 1}, out_params={'weight': 0, 'bias': 0}))
register_spec('torch.nn.modules.batchnorm._NormBase', dict(
    kind='channelwise', params={'weight': 0, 'bias': 0, 'running_mean': 0, 'running_var': 0}, channel_dim=1))
register_spec(nn.LayerNorm, dict(kind='channelwise', params={'weight': 0, 'bias': 0}, channel_dim=-1))
register_spec(nn.GroupNorm, dict(kind='channelwise', params={'weight': 0, 'bias': 0}, channel_dim=1))
register_spec('spconv.pytorch.conv.SparseConvolution', _SPARSE_CONV)
register_spec('fsdlite.models.layers.sparse_conv.RulebookSparseConv3d', _SPARSE_CONV)

__all__ = ['KINDS', 'SlimSpec', 'register_spec', 'spec_for', 'resolve_param']
