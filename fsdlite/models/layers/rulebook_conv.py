"""Rulebook sparse convolution: gather-GEMM over a padded neighbour map, with spconv's weights unchanged.

The static (fixed-shape) path of a sparse network runs every spconv layer as

    out = sum_k x_pad[nbr[:, k]] @ W_k + bias          x_pad = [x; 0] (zero dump row at index Vin)

where ``nbr`` (Vout, K) comes from the ``fsdlite.ops`` rulebook ops (dump index = Vin for missing
neighbours and padding) and ``W_k`` is spconv's weight ``(Cout, kz, ky, kx, Cin)`` at offset k
(``itertools.product`` order). Padding output rows hold the bias (never read by later rulebooks).

* :func:`rulebook_conv` -- the functional convolution (autograd through gather/matmul; exportable);
* :func:`rulebook_conv_forward` -- runs an ``spconv`` ``SubMConv3d``/``SparseConv3d``/``SparseInverseConv3d``
  (or a :class:`RulebookSparseConv3d`) on padded features and its neighbour map;
* :func:`build_rulebook` -- the neighbour map of such a module, reusing maps by ``indice_key`` as spconv does
  (submanifold layers share one; an inverse conv transposes the map of its strided conv);
* :class:`RulebookSparseConv3d` -- a module with spconv's state_dict keys/layout (``weight``, ``bias``,
  ``max_num_voxels_during_training``), so spconv checkpoints load with ``strict=True``.

spconv quirk kept on purpose: for 1x1x1 kernels with stride 1 spconv multiplies by ``weight.view(Cin, Cout)``
(its KRSC weight reinterpreted, not transposed); we do the same so trained checkpoints give identical outputs.
"""
import math
from typing import NamedTuple

import torch
from torch import nn

import fsdlite.ops as fsdlite_ops
from fsdlite.ops import conv_output_shape, rulebook_inverse
from fsdlite.structures.bounds import check_bound, is_exporting
from fsdlite.structures.padded import with_dump_row

CONV_KINDS = ('subm', 'conv', 'inverse')
_MAX_VOXELS_BUFFER = 'max_num_voxels_during_training'  # spconv's record_voxel_count buffer


class ConvGeometry(NamedTuple):
    """Geometry of one sparse conv layer (spconv or :class:`RulebookSparseConv3d`)."""
    kind: str              #: 'subm', 'conv' (strided/regular) or 'inverse'
    kernel_size: tuple     #: (kz, ky, kx)
    stride: tuple
    padding: tuple
    dilation: tuple
    indice_key: object     #: spconv rulebook key (None: not shared)
    one_by_one: bool       #: spconv's conv1x1 fast path (K == 1, stride 1): weight.view(Cin, Cout)


def conv_geometry(module):
    """Read the :class:`ConvGeometry` of an spconv conv or a :class:`RulebookSparseConv3d`."""
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


def rulebook_conv(feats, nbr, weight, bias=None, one_by_one=False, mode='auto'):
    """Sparse convolution over a neighbour map.

    Args:
        feats (Tensor): (Vin, Cin) input features (padding rows allowed: never referenced).
        nbr (Tensor): (Vout, K) int64 rows of ``feats``, ``Vin`` = dump (zero contribution).
        weight (Tensor): (Cout, kz, ky, kx, Cin) spconv layout, K = kz * ky * kx.
        bias (Tensor, optional): (Cout,).
        one_by_one (bool): spconv's 1x1 path (``feats @ weight.view(Cin, Cout)``).
        mode (str): 'matmul' (one (Vout, K*Cin) @ (K*Cin, Cout) product), 'loop' (K accumulated products,
            less memory) or 'auto' (matmul when the gathered (Vout, K, Cin) buffer is <= 64 MiB). Both compute
            the same sums (float rounding aside). A per-offset gather-GEMM-scatter over the existing pairs only
            (spconv's scheme, data-dependent shapes) was slower on CPU than both and is not offered.
    Returns:
        Tensor: (Vout, Cout).
    """
    cout, cin = weight.shape[0], weight.shape[-1]
    kv = math.prod(weight.shape[1:-1])
    if feats.dim() != 2 or feats.shape[1] != cin:
        raise ValueError(f'rulebook_conv: feats must have shape (Vin, {cin}), got {tuple(feats.shape)}')
    if nbr.dim() != 2 or nbr.shape[1] != kv:
        raise ValueError(f'rulebook_conv: nbr must have shape (Vout, {kv}) for kernel {tuple(weight.shape[1:-1])}, '
                         f'got {tuple(nbr.shape)}')
    if mode not in ('auto', 'matmul', 'loop'):
        raise ValueError(f"rulebook_conv: mode must be 'auto', 'matmul' or 'loop', got {mode!r}")
    if nbr.numel() and not is_exporting():
        lo, hi = int(nbr.min()), int(nbr.max())
        if lo < 0 or hi > feats.shape[0]:
            raise ValueError(f'rulebook_conv: nbr contains {lo if lo < 0 else hi}, expected rows in '
                             f'[0, {feats.shape[0]}] (Vin = {feats.shape[0]} is the dump)')
    x = with_dump_row(feats)
    vout = nbr.shape[0]
    if mode == 'auto':
        mode = 'matmul' if vout * kv * cin * feats.element_size() <= 64 * 2 ** 20 else 'loop'
    w = kernel_matrices(weight, one_by_one)  # (K, Cin, Cout)
    if mode == 'matmul':
        gathered = x.index_select(0, nbr.reshape(-1)).view(vout, kv * cin)
        out = gathered @ w.reshape(kv * cin, cout)
    else:
        out = feats.new_zeros(vout, cout)
        for k in range(kv):
            out = out + x.index_select(0, nbr[:, k]) @ w[k]
    return out if bias is None else out + bias


def rulebook_conv_forward(module, feats, nbr, mode='auto'):
    """Run an spconv conv layer (or :class:`RulebookSparseConv3d`) on padded features via its neighbour map.

    Args:
        module: spconv ``SubMConv3d`` / ``SparseConv3d`` / ``SparseInverseConv3d`` or RulebookSparseConv3d.
        feats (Tensor): (Vin_max, Cin) padded input features.
        nbr (Tensor): (Vout_max, K) neighbour map of this layer (:func:`build_rulebook`).
        mode (str): see :func:`rulebook_conv`.
    Returns:
        Tensor: (Vout_max, Cout) output features (bias in padding rows).
    """
    geometry = conv_geometry(module)
    return rulebook_conv(feats, nbr, module.weight, module.bias, one_by_one=geometry.one_by_one, mode=mode)


class Rulebook(NamedTuple):
    """Neighbour map of one layer and its output voxels (all padded)."""
    nbr: torch.Tensor            #: (Vout_max, K) int64 rows of the input; Vin_max = dump
    out_coors: torch.Tensor      #: (Vout_max, 4) int64 [b, z, y, x] (padding rows 0)
    num_valid_out: torch.Tensor  #: () int64
    out_spatial_shape: tuple     #: (nz, ny, nx) of the output grid
    num_dropped: torch.Tensor    #: () int64 outputs beyond the bound (0 unless exporting)


class _Entry(NamedTuple):
    geometry: ConvGeometry
    in_coors: torch.Tensor
    in_num_valid: torch.Tensor
    in_spatial_shape: tuple
    rulebook: Rulebook


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


def build_rulebook(module, coors, num_valid, spatial_shape, cache=None, max_out=None, bound_name='max_voxels',
                  ops=None, strict=None):
    """Neighbour map and output voxels of a sparse conv layer on padded voxels.

    Reuse follows spconv's ``indice_key``: layers with the same key share the map (same geometry and, checked
    in eager mode, the same input voxels; so a strided conv needs its own key, as in spconv); an inverse conv
    uses the entry of the strided conv with its key (its outputs are that conv's input voxels). Layers without
    a key are never cached. A cache filled by one pass can be given to the next one: every layer then finds
    its map there. Exported graphs take the maps (``Rulebook.nbr``) as tensor inputs, built here in eager mode
    (the rulebook ops cannot run in a graph), or build them in-graph through an export-safe ``ops``.

    Args:
        module: spconv conv or :class:`RulebookSparseConv3d`.
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
            mode); False keeps the first ``max_out`` and counts the rest in ``Rulebook.num_dropped``.
    Returns:
        Rulebook
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
        return Rulebook(nbr, entry.in_coors, entry.in_num_valid, entry.in_spatial_shape,
                        torch.zeros((), dtype=torch.long, device=coors.device))
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
        rb = Rulebook(nbr, coors, num_valid, shape, torch.zeros((), dtype=torch.long, device=coors.device))
    else:
        if max_out is None:
            raise ValueError(f'strided conv (indice_key={key!r}) needs max_out, the output voxel bound')
        res = build_conv(coors, num_valid, shape, g.kernel_size, g.stride, g.padding, g.dilation, max_out=max_out)
        needed = res.num_valid_out + res.num_dropped
        dropped = check_bound(needed, max_out, bound_name, strict=strict)
        buffer = getattr(module, _MAX_VOXELS_BUFFER, None)
        if buffer is not None:
            buffer.copy_(torch.maximum(buffer, needed.to(buffer)))
        rb = Rulebook(res.nbr, res.out_coors, res.num_valid_out,
                      conv_output_shape(shape, g.kernel_size, g.stride, g.padding, g.dilation), dropped)
    if cache is not None and key is not None:
        cache[key] = _Entry(g, coors, num_valid, shape, rb)
    return rb


class RulebookSparseConv3d(nn.Module):
    """Sparse 3D conv run through a neighbour map, parameter-compatible with spconv 2.x.

    ``weight`` (Cout, kz, ky, kx, Cin) and ``bias`` (Cout,) are spconv's, so a state_dict of an spconv
    ``SubMConv3d`` (``subm=True``), ``SparseConv3d`` or ``SparseInverseConv3d`` (``inverse=True``) with the
    same arguments loads with ``strict=True`` (including ``max_num_voxels_during_training`` when
    ``record_voxel_count=True``, updated by :func:`build_rulebook`).

    Args:
        in_channels, out_channels (int): Cin, Cout.
        kernel_size, stride, padding, dilation (int | Sequence[int]): geometry (z, y, x), as spconv.
        bias (bool): learnable bias.
        subm (bool): submanifold conv (odd kernel; output voxels = input voxels).
        inverse (bool): inverse of the strided conv sharing ``indice_key``.
        indice_key (str, optional): rulebook sharing key (see :func:`build_rulebook`).
        record_voxel_count (bool): keep spconv's max-output-voxels buffer (strided convs).

    Forward: ``(feats (Vin_max, Cin), nbr (Vout_max, K)) -> (Vout_max, Cout)``.
    """

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, padding=0, dilation=1, bias=True,
                 subm=False, inverse=False, indice_key=None, record_voxel_count=False):
        super().__init__()
        if subm and inverse:
            raise ValueError('RulebookSparseConv3d: subm and inverse are exclusive')
        if inverse and indice_key is None:
            raise ValueError('RulebookSparseConv3d: an inverse conv needs the indice_key of its strided conv')
        triple = lambda v: [int(v)] * 3 if isinstance(v, int) else [int(x) for x in v]  # noqa: E731
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size, self.stride = triple(kernel_size), triple(stride)
        self.padding, self.dilation = triple(padding), triple(dilation)
        self.subm, self.inverse, self.indice_key = bool(subm), bool(inverse), indice_key
        self.ndim, self.transposed = 3, False
        if self.inverse:  # spconv's inverse convs take their geometry from the paired conv
            self.stride, self.padding, self.dilation = [1] * 3, [0] * 3, [1] * 3
        self.weight = nn.Parameter(torch.empty(self.out_channels, *self.kernel_size, self.in_channels))
        self.bias = nn.Parameter(torch.empty(self.out_channels)) if bias else None
        if record_voxel_count and not subm and not inverse:
            self.register_buffer(_MAX_VOXELS_BUFFER, torch.zeros(1, dtype=torch.int32))
        self.reset_parameters()

    def reset_parameters(self):
        """Kaiming-uniform weight (fan_in = K * Cin) and uniform bias, as torch conv layers."""
        fan_in = self.in_channels * math.prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in)
        nn.init.uniform_(self.weight, -math.sqrt(3) * bound, math.sqrt(3) * bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_spconv(cls, module):
        """A RulebookSparseConv3d with the geometry and (copied) parameters of an spconv conv."""
        g = conv_geometry(module)
        new = cls(module.in_channels, module.out_channels, g.kernel_size, g.stride, g.padding, g.dilation,
                  bias=module.bias is not None, subm=bool(module.subm), inverse=bool(module.inverse),
                  indice_key=g.indice_key, record_voxel_count=hasattr(module, _MAX_VOXELS_BUFFER))
        new.load_state_dict(module.state_dict(), strict=True)
        return new.to(module.weight.device)

    def forward(self, feats, nbr, mode='auto'):
        """(Vin_max, Cin) features and (Vout_max, K) neighbour map -> (Vout_max, Cout)."""
        return rulebook_conv_forward(self, feats, nbr, mode=mode)

    def extra_repr(self):
        """Channels, kind (subm / inverse / conv), kernel geometry and ``indice_key``."""
        kind = 'subm' if self.subm else ('inverse' if self.inverse else 'conv')
        return (f'{self.in_channels}, {self.out_channels}, kind={kind}, kernel_size={self.kernel_size}, '
                f'stride={self.stride}, padding={self.padding}, dilation={self.dilation}, '
                f'indice_key={self.indice_key!r}')


__all__ = ['CONV_KINDS', 'ConvGeometry', 'conv_geometry', 'kernel_matrices', 'rulebook_conv', 'rulebook_conv_forward',
           'Rulebook', 'build_rulebook', 'RulebookSparseConv3d']
