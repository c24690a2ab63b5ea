"""Sparse-conv geometry and neighbour maps (spconv's rulebooks as padded index tensors).

* :func:`conv_geometry` -- kind and kernel geometry of an spconv ``SubMConv3d`` / ``SparseConv3d`` /
  ``SparseInverseConv3d`` or a :class:`~fsdlite.models.layers.sparse_conv.RulebookSparseConv3d`;
* :func:`kernel_matrices` -- spconv's weight ``(Cout, kz, ky, kx, Cin)`` as the (K, Cin, Cout) matrices
  :func:`~fsdlite.models.layers.sparse_conv.sparse_conv` takes (offset k in ``itertools.product`` order);
* :func:`build_rulebook` -- the (Vout, K) neighbour map of such a layer on padded voxels (dump index = Vin for
  missing neighbours and padding), reusing maps by ``indice_key`` as spconv does (submanifold layers share one; an
  inverse conv transposes the map of its strided conv); read as a dense
  :class:`~fsdlite.models.layers.sparse_conv.KernelMap`.

spconv quirk kept on purpose: for 1x1x1 kernels with stride 1 spconv multiplies by ``weight.view(Cin, Cout)``
(its KRSC weight reinterpreted, not transposed); :func:`kernel_matrices` does the same so trained checkpoints give
identical outputs.
"""
import math
from typing import NamedTuple

import torch

import fsdlite.ops as fsdlite_ops
from fsdlite.ops import ConvRulebook, conv_output_shape, rulebook_inverse
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


class _Entry(NamedTuple):
    geometry: ConvGeometry
    in_coors: torch.Tensor
    in_num_valid: torch.Tensor
    in_spatial_shape: tuple
    rulebook: ConvRulebook


def _inverse_map(nbr, num_rows, ops=None):
    """Transposed pairs of a strided map (``ops.rulebook_inverse`` when given; else pure torch when exporting,
    the validated op otherwise)."""
    if ops is not None:
        return ops.rulebook_inverse(nbr, num_rows)
    if not is_exporting():
        return rulebook_inverse(nbr, num_rows)
    vout, kv = nbr.shape
    rows = torch.arange(vout, device=nbr.device).view(-1, 1).expand(vout, kv)
    inv = torch.full((num_rows + 1, kv), vout, dtype=torch.long, device=nbr.device)
    return inv.scatter(0, nbr, rows)[:num_rows]  # the dump row num_rows absorbs every missing pair


def _same_geometry(a, b):
    return (a.kernel_size, a.stride, a.padding, a.dilation) == (b.kernel_size, b.stride, b.padding, b.dilation)


def _same_voxels(entry, coors, num_valid, spatial_shape):
    n = int(num_valid)
    return (tuple(int(v) for v in spatial_shape) == tuple(entry.in_spatial_shape) and n == int(entry.in_num_valid)
            and entry.in_coors.shape == coors.shape and torch.equal(entry.in_coors[:n], coors[:n]))


def output_grid(module, spatial_shape, cache=None):
    """(nz, ny, nx) output grid of a sparse conv layer on an input grid ``spatial_shape``: the same grid for a
    submanifold conv, :func:`fsdlite.ops.conv_output_shape` for a strided one, and for an inverse conv the input grid
    of the strided conv with its ``indice_key`` (from the :func:`build_rulebook` ``cache``)."""
    g = conv_geometry(module)
    if g.kind == 'subm':
        return tuple(int(v) for v in spatial_shape)
    if g.kind == 'conv':
        return conv_output_shape(spatial_shape, g.kernel_size, g.stride, g.padding, g.dilation)
    entry = None if cache is None else cache.get(g.indice_key)
    if entry is None:
        raise KeyError(f'output_grid: the inverse conv with indice_key {g.indice_key!r} needs the cache holding its '
                       'strided conv')
    return tuple(entry.in_spatial_shape)


def build_rulebook(module, coors, num_valid, spatial_shape, cache=None, max_out=None, bound_name='max_voxels',
                  ops=None, strict=None):
    """Neighbour map and output voxels of a sparse conv layer on padded voxels.

    Reuse follows spconv's ``indice_key``: layers with the same key share the map (same geometry and, checked
    in eager mode, the same input voxels; so a strided conv needs its own key, as in spconv); an inverse conv
    uses the entry of the strided conv with its key (its outputs are that conv's input voxels). Layers without
    a key are never cached. A cache filled by one pass can be given to the next one: every layer then finds
    its map there. Exported graphs take the maps (``ConvRulebook.nbr``) as tensor inputs, built here in eager mode
    (the rulebook ops cannot run in a graph), or build them in-graph through an export-safe ``ops``.

    Args:
        module: spconv conv or ``RulebookSparseConv3d``.
        coors (Tensor): (Vmax, 4) int64 ``[b, z, y, x]``, rows ``< num_valid`` unique.
        num_valid (Tensor | int): valid rows.
        spatial_shape (Sequence[int]): input grid (nz, ny, nx).
        cache (dict, optional): ``indice_key -> entry``, filled by this call (pass the same dict for a whole
            forward pass, like spconv's ``indice_dict``).
        max_out (int): output bound of a strided conv (required for kind 'conv').
        bound_name (str): bound name in the overflow error (e.g. ``'max_voxels[2]'``).
        ops (optional): object with ``rulebook_subm``, ``rulebook_conv`` and ``rulebook_inverse`` of the
            ``fsdlite.ops`` signatures (default: ``fsdlite.ops``, eager only); an export-safe implementation
            builds rulebooks inside a graph.
        strict (bool, optional): raise when a strided conv has more than ``max_out`` outputs (default: eager
            mode); False keeps the first ``max_out`` and counts the rest in ``num_dropped``.
    Returns:
        ConvRulebook: the layer's (V_out, K) ``nbr`` and its output voxels ``out_coors`` / ``num_valid_out`` (a
        submanifold conv's are its input's, an inverse conv's its strided conv's input), ``num_dropped`` outputs
        beyond ``max_out``; the output grid is :func:`output_grid`'s.
    Raises:
        BoundExceededError: (strict) a strided conv has more than ``max_out`` output voxels.
    """
    g = conv_geometry(module)
    key = g.indice_key
    entry = cache.get(key) if (cache is not None and key is not None) else None
    if g.kind == 'inverse':
        if entry is None or entry.geometry.kind != 'conv':
            raise KeyError(f'inverse conv with indice_key {key!r} needs the rulebook of the strided conv with that key '
                           f'in the cache; found {None if entry is None else entry.geometry.kind!r}')
        rb = entry.rulebook
        nbr = _inverse_map(rb.nbr, entry.in_coors.shape[0], ops)
        return ConvRulebook(entry.in_coors, entry.in_num_valid, torch.zeros((), dtype=torch.long, device=coors.device),
                            nbr)
    if entry is not None:
        if entry.geometry.kind != g.kind or not _same_geometry(entry.geometry, g):
            raise ValueError(f'indice_key {key!r} is shared by layers of different geometry ({entry.geometry} vs {g})')
        if not is_exporting() and not _same_voxels(entry, coors, num_valid, spatial_shape):
            raise ValueError(f'indice_key {key!r} is shared by layers with different input voxels (a strided conv '
                             'needs a new key, as in spconv)')
        return entry.rulebook
    if ops is None and is_exporting():
        raise RuntimeError(f'the rulebook of layer {type(module).__name__}(indice_key={key!r}) is not in the cache; '
                           'exported graphs take rulebooks as inputs (build them with build_rulebook in eager mode)')
    ops = fsdlite_ops if ops is None else ops
    build_conv, rulebook_subm = ops.rulebook_conv, ops.rulebook_subm
    num_valid = num_valid if isinstance(num_valid, torch.Tensor) else torch.tensor(int(num_valid))
    num_valid = num_valid.to(device=coors.device, dtype=torch.long).reshape(())
    shape = tuple(int(v) for v in spatial_shape)
    if g.kind == 'subm':
        nbr = (torch.where(torch.arange(coors.shape[0], device=coors.device) < num_valid,
                           torch.arange(coors.shape[0], device=coors.device), coors.shape[0]).view(-1, 1)
               if g.one_by_one else rulebook_subm(coors, num_valid, shape, g.kernel_size, g.dilation))
        rb = ConvRulebook(coors, num_valid, torch.zeros((), dtype=torch.long, device=coors.device), nbr)
    else:
        if max_out is None:
            raise ValueError(f'strided conv (indice_key={key!r}) needs max_out, the output voxel bound')
        res = build_conv(coors, num_valid, shape, g.kernel_size, g.stride, g.padding, g.dilation, max_out=max_out)
        needed = res.num_valid_out + res.num_dropped
        dropped = check_bound(needed, max_out, bound_name, strict=strict)
        buffer = getattr(module, MAX_VOXELS_BUFFER, None)
        if buffer is not None:
            buffer.copy_(torch.maximum(buffer, needed.to(buffer)))
        rb = ConvRulebook(res.out_coors, res.num_valid_out, dropped, res.nbr)
    if cache is not None and key is not None:
        cache[key] = _Entry(g, coors, num_valid, shape, rb)
    return rb


__all__ = ['CONV_KINDS', 'MAX_VOXELS_BUFFER', 'ConvGeometry', 'conv_geometry', 'kernel_matrices', 'output_grid',
           'build_rulebook']
