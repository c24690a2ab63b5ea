"""Sparse-conv geometry and neighbour maps (spconv's rulebooks as padded index tensors).

* :func:`conv_geometry` -- kind and kernel geometry of an spconv ``SubMConv3d`` / ``SparseConv3d`` /
  ``SparseInverseConv3d`` or a :class:`~fsdlite.models.layers.sparse_conv.RulebookSparseConv3d`;
* :func:`kernel_matrices` -- spconv's weight ``(Cout, kz, ky, kx, Cin)`` as the (K, Cin, Cout) matrices
  :func:`~fsdlite.models.layers.sparse_conv.sparse_conv` takes (offset k in ``itertools.product`` order);
* :func:`build_rulebook` -- the (Vout, K) neighbour map of a submanifold or strided layer on padded voxels (dump
  index = Vin for missing neighbours and padding), and :func:`inverse_rulebook` -- an inverse conv's (its strided
  conv's, transposed); read as dense :class:`~fsdlite.models.layers.sparse_conv.KernelMap`.

spconv quirk kept on purpose: for 1x1x1 kernels with stride 1 spconv multiplies by ``weight.view(Cin, Cout)``
(its KRSC weight reinterpreted, not transposed); :func:`kernel_matrices` does the same so trained checkpoints give
identical outputs.
"""
import math
from typing import NamedTuple

import torch

import fsdlite.ops as fsdlite_ops
from fsdlite.ops import ConvRulebook, conv_output_shape
from fsdlite.structures.bounds import check_bound, is_exporting

CONV_KINDS = ('subm', 'conv', 'inverse')
MAX_VOXELS_BUFFER = 'max_num_voxels_during_training'  #: spconv's record_voxel_count buffer


class ConvGeometry(NamedTuple):
    """Geometry of one sparse conv layer (spconv or ``RulebookSparseConv3d``)."""
    kind: str              #: 'subm', 'conv' (strided/regular) or 'inverse'
    kernel_size: tuple     #: (kz, ky, kx)
    stride: tuple
    padding: tuple
    dilation: tuple
    indice_key: object     #: spconv rulebook key (None: not shared)
    one_by_one: bool       #: spconv's conv1x1 fast path (K == 1, stride 1): weight.view(Cin, Cout)


def conv_geometry(module):
    """Read the :class:`ConvGeometry` of an spconv conv or a ``RulebookSparseConv3d``."""
    for attr in ('kernel_size', 'stride', 'padding', 'dilation', 'subm', 'inverse', 'weight'):
        if not hasattr(module, attr):
            raise TypeError(f'{type(module).__name__} is not a sparse conv (no {attr!r}); expected spconv '
                            'SubMConv3d/SparseConv3d/SparseInverseConv3d or RulebookSparseConv3d')
    if getattr(module, 'transposed', False):
        raise NotImplementedError(f'{type(module).__name__}: transposed sparse convs are not supported')
    if getattr(module, 'ndim', 3) != 3 or len(module.kernel_size) != 3:
        raise ValueError(f'{type(module).__name__}: only 3D sparse convs are supported')
    kind = 'subm' if module.subm else ('inverse' if module.inverse else 'conv')
    k, s = tuple(int(v) for v in module.kernel_size), tuple(int(v) for v in module.stride)
    one_by_one = math.prod(k) == 1 and (module.subm or s == (1, 1, 1))
    if one_by_one and kind == 'conv':
        kind = 'subm'  # spconv keeps the input voxels (same rows) for k=1, s=1
    return ConvGeometry(kind, k, s, tuple(int(v) for v in module.padding), tuple(int(v) for v in module.dilation),
                        getattr(module, 'indice_key', None), one_by_one)


def kernel_matrices(weight, one_by_one=False):
    """spconv weight (Cout, kz, ky, kx, Cin) as (K, Cin, Cout) matrices ``W_k`` (offset k in itertools.product
    order; spconv's 1x1 quirk: the weight reinterpreted as (Cin, Cout), see the module docstring)."""
    cout, cin = weight.shape[0], weight.shape[-1]
    if one_by_one:
        return weight.reshape(1, cin, cout)
    return weight.reshape(cout, -1, cin).permute(1, 2, 0)


def _rulebook_ops(ops, layer):
    """``ops``, or ``fsdlite.ops`` in eager mode; the rulebook ops cannot run in an exported graph, so exporting
    needs an export-safe ``ops`` (or the maps as graph inputs)."""
    if ops is not None:
        return ops
    if is_exporting():
        raise RuntimeError(f'the rulebook of {layer} cannot be built in a graph without an export-safe ops; exported '
                           'graphs take rulebooks as inputs (build them with build_rulebook in eager mode)')
    return fsdlite_ops


def inverse_rulebook(strided, in_coors, in_num_valid, ops=None):
    """The neighbour map of the inverse conv of a strided conv: that conv's pairs with input and output swapped.

    Args:
        strided (ConvRulebook): the strided conv's (:func:`build_rulebook`).
        in_coors (Tensor): (Vin, 4) the strided conv's input voxels (the inverse conv's outputs);
            in_num_valid (Tensor | int): their valid rows.
        ops (optional): an export-safe ``rulebook_inverse`` (see :func:`build_rulebook`; default ``fsdlite.ops``,
            eager only).
    Returns:
        ConvRulebook: (Vin, K) ``nbr`` (dump = the strided conv's output rows), output voxels ``in_coors``.
    """
    inv = _rulebook_ops(ops, 'an inverse conv').rulebook_inverse(strided.nbr, in_coors.shape[0])
    num_valid = torch.as_tensor(in_num_valid, device=in_coors.device).reshape(())
    return ConvRulebook(in_coors, num_valid, torch.zeros((), dtype=torch.long, device=in_coors.device), inv)


def output_grid(module, spatial_shape):
    """(nz, ny, nx) output grid of a submanifold or strided sparse conv layer on an input grid ``spatial_shape``
    (an inverse conv's is its strided conv's input grid)."""
    g = conv_geometry(module)
    if g.kind == 'inverse':
        raise ValueError(f"output_grid: an inverse conv (indice_key={g.indice_key!r}) writes its strided conv's "
                         'input grid; take that one')
    if g.kind == 'subm':
        return tuple(int(v) for v in spatial_shape)
    return conv_output_shape(spatial_shape, g.kernel_size, g.stride, g.padding, g.dilation)


def build_rulebook(module, coors, num_valid, spatial_shape, max_out=None, bound_name='max_voxels', ops=None,
                   strict=None):
    """Neighbour map and output voxels of a submanifold or strided sparse conv layer on padded voxels.

    Exported graphs take the maps (``ConvRulebook.nbr``) as tensor inputs, built here in eager mode (the rulebook ops
    cannot run in a graph), or build them in-graph through an export-safe ``ops``.  Which layers share a map (spconv's
    ``indice_key``) is the caller's business: :meth:`~fsdlite.models.layers.conv_plan.ConvPlan.build_rulebooks`
    keys them as the :class:`~fsdlite.models.layers.sparse_tensor.SparseTensor` cache does; an inverse conv's map is
    :func:`inverse_rulebook` of its strided conv's.

    Args:
        module: spconv conv or ``RulebookSparseConv3d`` (not an inverse conv).
        coors (Tensor): (Vmax, 4) int64 ``[b, z, y, x]``, rows ``< num_valid`` unique.
        num_valid (Tensor | int): valid rows.
        spatial_shape (Sequence[int]): input grid (nz, ny, nx).
        max_out (int): output bound of a strided conv (required for kind 'conv').
        bound_name (str): bound name in the overflow error (e.g. ``'max_voxels[2]'``).
        ops (optional): object with ``rulebook_subm``, ``rulebook_conv`` and ``rulebook_inverse`` of the
            ``fsdlite.ops`` signatures (default: ``fsdlite.ops``, eager only); an export-safe implementation
            builds rulebooks inside a graph.
        strict (bool, optional): raise when a strided conv has more than ``max_out`` outputs (default: eager
            mode); False keeps the first ``max_out`` and counts the rest in ``num_dropped``.
    Returns:
        ConvRulebook: the layer's (V_out, K) ``nbr`` and its output voxels ``out_coors`` / ``num_valid_out`` (a
        submanifold conv's are its input's), ``num_dropped`` outputs beyond ``max_out``; the output grid is
        :func:`output_grid`'s.
    Raises:
        BoundExceededError: (strict) a strided conv has more than ``max_out`` output voxels.
    """
    g = conv_geometry(module)
    if g.kind == 'inverse':
        raise ValueError(f'build_rulebook: an inverse conv (indice_key={g.indice_key!r}) takes its strided conv\'s map '
                         'transposed (inverse_rulebook)')
    ops = _rulebook_ops(ops, f'layer {type(module).__name__}(indice_key={g.indice_key!r})')
    num_valid = num_valid if isinstance(num_valid, torch.Tensor) else torch.tensor(int(num_valid))
    num_valid = num_valid.to(device=coors.device, dtype=torch.long).reshape(())
    shape = tuple(int(v) for v in spatial_shape)
    zero = torch.zeros((), dtype=torch.long, device=coors.device)
    if g.kind == 'subm':
        rows = torch.arange(coors.shape[0], device=coors.device)
        nbr = (torch.where(rows < num_valid, rows, coors.shape[0]).view(-1, 1) if g.one_by_one
               else ops.rulebook_subm(coors, num_valid, shape, g.kernel_size, g.dilation))
        return ConvRulebook(coors, num_valid, zero, nbr)
    if max_out is None:
        raise ValueError(f'strided conv (indice_key={g.indice_key!r}) needs max_out, the output voxel bound')
    res = ops.rulebook_conv(coors, num_valid, shape, g.kernel_size, g.stride, g.padding, g.dilation, max_out=max_out)
    needed = res.num_valid_out + res.num_dropped
    dropped = check_bound(needed, max_out, bound_name, strict=strict)
    buffer = getattr(module, MAX_VOXELS_BUFFER, None)
    if buffer is not None:
        buffer.copy_(torch.maximum(buffer, needed.to(buffer)))
    return ConvRulebook(res.out_coors, res.num_valid_out, dropped, res.nbr)


__all__ = ['CONV_KINDS', 'MAX_VOXELS_BUFFER', 'ConvGeometry', 'conv_geometry', 'kernel_matrices', 'output_grid',
           'build_rulebook', 'inverse_rulebook']
