"""The sparse-convolution functional, its one pair format :class:`KernelMap`, and the conv module family.

A kernel map lists the (input row, output row) pairs of one sparse convolution grouped by kernel offset (offset
``k`` in ``itertools.product`` order of the kernel, spconv's weight order). One type, three layouts:

* **exact** -- ``pairs`` (2, P) and ``offset_starts`` (K + 1,) marking where each offset's pairs start; no padding,
  output rows ascending within an offset (``fsdlite.ops.subm_offset_pairs`` / ``conv_offset_pairs`` /
  ``pairs_by_offset``). Run by fsdlite's fused kernels (``fsdlite.ops.sparse_conv``, CPU and CUDA, forward and
  backward).
* **tiled** -- padded to a capacity of ``P`` pairs in tiles of ``tile`` rows, one kernel offset per tile
  (``tile_offsets``); unused rows point at the dump rows (input ``num_in``, output ``num_out``). Run as a
  gather-GEMM-scatter of standard ops (Gather / MatMul / ScatterND(add), static shapes), in chunks of tiles.
* **dense** -- padded to one slot per output row and offset: ``nbr`` (Vout, K) holds the input row of each (the
  output row is implicit), ``num_in`` where there is none (spconv's rulebooks as padded index tensors). Run as a
  gather-GEMM of standard ops.

:func:`sparse_conv` picks the backend from the layout; weights are (K, Cin, Cout) matrices
(:func:`~fsdlite.models.layers.rulebook_conv.kernel_matrices` of spconv's ``(Cout, kz, ky, kx, Cin)`` weight).
:class:`RulebookSparseConv3d` holds spconv's parameters unchanged and runs on a kernel map;
:func:`conv_module_forward` runs an spconv layer the same way.
"""
import math
from typing import NamedTuple, Optional

import torch
from torch import nn

import fsdlite.ops as fsdlite_ops
from fsdlite.structures.padded import with_dump_row

from .rulebook_conv import MAX_VOXELS_BUFFER, conv_geometry, kernel_matrices
from .static_ops import check_index

PAIR_TILE = 128  #: rows per tile of a tiled map (one kernel offset each); larger tiles copy fewer weights
CHUNK_BYTES = 2 ** 20  #: gathered input rows a tiled conv handles per chunk (:func:`chunk_tiles`)
DENSE_MODES = ('auto', 'matmul', 'loop')


class KernelMap(NamedTuple):
    """Offset-grouped (input row, output row) pairs of one sparse convolution (layouts: module docstring).

    Build with :meth:`exact`, :meth:`tiled` or :meth:`dense`.
    """
    pairs: Optional[torch.Tensor]          #: exact, tiled: (2, P) int64 [input row; output row], grouped by offset
    offset_starts: Optional[torch.Tensor]  #: exact: (K + 1,) int64 first pair of each offset (last = P)
    tile_offsets: Optional[torch.Tensor]   #: tiled: (P // tile,) int64 kernel offset of each tile
    nbr: Optional[torch.Tensor]            #: dense: (Vout, K) int64 input row per output row and offset
    num_in: int                            #: input rows Vin (the input dump row of a padded map)
    num_out: int                           #: output rows Vout (the output dump row of a tiled map)

    @classmethod
    def exact(cls, offset_pairs, num_in, num_out):
        """An exact map from ``(pairs (2, P), offset_starts (K + 1,))`` (``fsdlite.ops.OffsetPairs``)."""
        pairs, starts = offset_pairs
        return cls(pairs, starts, None, None, int(num_in), int(num_out))

    @classmethod
    def tiled(cls, pair_list, num_in, num_out, tile=PAIR_TILE):
        """A tiled map from a (3, P) int64 pair list ``[input row; output row; kernel offset]`` (P a multiple of
        ``tile``, the offset constant within a tile: :mod:`~fsdlite.models.layers.pair_conv`). Works inside an
        exported graph (slices only)."""
        if pair_list.dim() != 2 or pair_list.shape[0] != 3 or pair_list.shape[1] % tile:
            raise ValueError(f'KernelMap.tiled: the pair list must have shape (3, P) with P a multiple of {tile}, '
                             f'got {tuple(pair_list.shape)}')
        return cls(pair_list[:2], None, pair_list[2].view(-1, tile)[:, 0], None, int(num_in), int(num_out))

    @classmethod
    def dense(cls, nbr, num_in):
        """A dense map from a (Vout, K) int64 neighbour map whose missing entries are ``num_in``
        (:func:`~fsdlite.models.layers.rulebook_conv.build_rulebook`)."""
        return cls(None, None, None, nbr, int(num_in), int(nbr.shape[0]))

    @property
    def layout(self):
        """``'exact'``, ``'tiled'`` or ``'dense'``."""
        return 'dense' if self.nbr is not None else ('tiled' if self.tile_offsets is not None else 'exact')

    def transposed(self):
        """The map of the inverse convolution of an exact or tiled map: input and output rows swapped, the same
        offsets.  An exact map must list its input rows ascending within an offset (true of the strided convs'
        ``conv_offset_pairs``), so the swapped pairs keep the output order the fused kernels need."""
        if self.nbr is not None:
            raise ValueError('KernelMap.transposed: a dense map is transposed by rulebook_inverse (build_rulebook)')
        return self._replace(pairs=self.pairs.flip(0), num_in=self.num_out, num_out=self.num_in)


def sparse_conv(x, kernel_map, weight, bias=None, mode='auto'):
    """Sparse convolution ``out[o] = sum over pairs (i, o) of offset k of x[i] @ weight[k] (+ bias)``.

    Backend by the map's layout: exact -> ``fsdlite.ops.sparse_conv`` (fused, CPU/CUDA, differentiable); tiled ->
    gather-GEMM-scatter, dense -> gather-GEMM, both in standard ops (exportable, autograd through them).

    Args:
        x (Tensor): (Vin, Cin) input rows (padding rows allowed: a padded map never reads them).
        kernel_map (KernelMap): the convolution's pairs.
        weight (Tensor): (K, Cin, Cout) one matrix per kernel offset.
        bias (Tensor, optional): (Cout,).
        mode (str): dense maps only: 'matmul' (one (Vout, K*Cin) @ (K*Cin, Cout) product), 'loop' (K accumulated
            products, less memory) or 'auto' (matmul when the gathered (Vout, K, Cin) buffer is <= 64 MiB).
    Returns:
        Tensor: (num_out, Cout); rows without pairs hold the bias (or 0).
    """
    if kernel_map.layout == 'exact':
        return fsdlite_ops.sparse_conv(x, weight, kernel_map.pairs, kernel_map.offset_starts, kernel_map.num_out,
                                       bias=bias)
    cin = weight.shape[1]
    if x.dim() != 2 or x.shape[1] != cin:
        raise ValueError(f'sparse_conv: x must have shape (Vin, {cin}), got {tuple(x.shape)}')
    if kernel_map.layout == 'dense':
        return _dense_conv(x, kernel_map.nbr, weight, bias, mode)
    return _tiled_conv(x, kernel_map, weight, bias)


def _output_rows(x, rows, cout, bias):
    """(rows, Cout) buffer the products are added into: the bias on every row (no separate pass), or zeros."""
    return x.new_zeros(rows, cout) if bias is None else bias.expand(rows, cout).contiguous()


def chunk_tiles(cin, tile, element_size=4):
    """Tiles per chunk of a tiled conv with ``cin`` input channels: about :data:`CHUNK_BYTES` of gathered input
    rows, at least one tile."""
    return max(1, CHUNK_BYTES // (int(cin) * int(tile) * int(element_size)))


def _tiled_conv(x, kernel_map, weight, bias):
    """Gather-GEMM-scatter over the tiles, a chunk of :func:`chunk_tiles` tiles at a time: each chunk's gathered
    rows, products and weights stay small enough to be in cache when the next op reads them (the graph runs op
    by op, so one pass over all P rows would write and read every intermediate through memory)."""
    cin, cout = weight.shape[1], weight.shape[2]
    pairs, num_out, num_tiles = kernel_map.pairs, kernel_map.num_out, kernel_map.tile_offsets.shape[0]
    check_index('sparse_conv: kernel_map.pairs[0] (input rows)', pairs[0], 0, x.shape[0] + 1)
    check_index('sparse_conv: kernel_map.pairs[1] (output rows)', pairs[1], 0, num_out + 1)
    check_index('sparse_conv: kernel_map.tile_offsets', kernel_map.tile_offsets, 0, weight.shape[0])
    tile = pairs.shape[1] // num_tiles if num_tiles else 1
    per_chunk = chunk_tiles(cin, tile, x.element_size())
    padded = with_dump_row(x)
    out = _output_rows(x, num_out + 1, cout, bias)
    for first in range(0, num_tiles, per_chunk):
        last = min(num_tiles, first + per_chunk)
        rows = slice(first * tile, last * tile)
        gathered = padded.index_select(0, pairs[0, rows]).view(last - first, tile, cin)
        z = torch.bmm(gathered, weight.index_select(0, kernel_map.tile_offsets[first:last])).view(-1, cout)
        out = out.index_add(0, pairs[1, rows], z)
    return out[:num_out]


def _dense_conv(x, nbr, weight, bias, mode):
    kv, cin, cout = weight.shape
    if nbr.dim() != 2 or nbr.shape[1] != kv:
        raise ValueError(f'sparse_conv: kernel_map.nbr must have shape (Vout, {kv}) for {kv} kernel offsets, got '
                         f'{tuple(nbr.shape)}')
    if mode not in DENSE_MODES:
        raise ValueError(f"sparse_conv: mode must be 'auto', 'matmul' or 'loop', got {mode!r}")
    check_index('sparse_conv: kernel_map.nbr', nbr, 0, x.shape[0] + 1)
    padded = with_dump_row(x)
    vout = nbr.shape[0]
    if mode == 'auto':
        mode = 'matmul' if vout * kv * cin * x.element_size() <= 64 * 2 ** 20 else 'loop'
    if mode == 'matmul':
        gathered = padded.index_select(0, nbr.reshape(-1)).view(vout, kv * cin)
        matrix = weight.reshape(kv * cin, cout)
        return gathered @ matrix if bias is None else torch.addmm(bias, gathered, matrix)
    out = _output_rows(x, vout, cout, bias)
    for k in range(kv):
        out = out + padded.index_select(0, nbr[:, k]) @ weight[k]
    return out


def conv_module_forward(module, x, kernel_map, mode='auto'):
    """Run an spconv ``SubMConv3d`` / ``SparseConv3d`` / ``SparseInverseConv3d`` (or a
    :class:`RulebookSparseConv3d`) on (Vin, Cin) features over its kernel map, weight and bias unchanged
    -> (num_out, Cout) (``mode``: :func:`sparse_conv`)."""
    matrices = kernel_matrices(module.weight, conv_geometry(module).one_by_one)
    return sparse_conv(x, kernel_map, matrices, module.bias, mode=mode)


def pair_capacity(max_pairs, kernel_volume, tile=PAIR_TILE):
    """Rows of a tiled map that holds any ``max_pairs`` real pairs of a K-offset convolution: each offset wastes
    at most ``tile - 1`` rows of its last tile, so ``round_up(max_pairs + K * (tile - 1), tile)``."""
    if int(max_pairs) < 1 or int(kernel_volume) < 1:
        raise ValueError(f'pair_capacity: max_pairs and kernel_volume must be >= 1, got {max_pairs}, {kernel_volume}')
    rows = int(max_pairs) + int(kernel_volume) * (tile - 1)
    return -(-rows // tile) * tile


class RulebookSparseConv3d(nn.Module):
    """Sparse 3D conv run on a :class:`KernelMap`, parameter-compatible with spconv 2.x.

    ``weight`` (Cout, kz, ky, kx, Cin) and ``bias`` (Cout,) are spconv's, so a state_dict of an spconv
    ``SubMConv3d`` (``subm=True``), ``SparseConv3d`` or ``SparseInverseConv3d`` (``inverse=True``) with the
    same arguments loads with ``strict=True`` (including ``max_num_voxels_during_training`` when
    ``record_voxel_count=True``, updated by :func:`~fsdlite.models.layers.rulebook_conv.build_rulebook`).

    spconv quirk kept on purpose: for 1x1x1 kernels with stride 1 spconv multiplies by ``weight.view(Cin, Cout)``
    (its weight reinterpreted, not transposed; :func:`~fsdlite.models.layers.rulebook_conv.kernel_matrices`), so
    trained checkpoints give identical outputs.

    Args:
        in_channels, out_channels (int): Cin, Cout.
        kernel_size, stride, padding, dilation (int | Sequence[int]): geometry (z, y, x), as spconv.
        bias (bool): learnable bias.
        subm (bool): submanifold conv (odd kernel; output voxels = input voxels).
        inverse (bool): inverse of the strided conv sharing ``indice_key``.
        indice_key (str, optional): rulebook sharing key (see ``build_rulebook``).
        record_voxel_count (bool): keep spconv's max-output-voxels buffer (strided convs).

    Forward: ``(feats (Vin, Cin), kernel_map) -> (kernel_map.num_out, Cout)``.
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
            self.register_buffer(MAX_VOXELS_BUFFER, torch.zeros(1, dtype=torch.int32))
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
                  indice_key=g.indice_key, record_voxel_count=hasattr(module, MAX_VOXELS_BUFFER))
        new.load_state_dict(module.state_dict(), strict=True)
        return new.to(module.weight.device)

    def forward(self, feats, kernel_map, mode='auto'):
        """(Vin, Cin) features on a :class:`KernelMap` -> (num_out, Cout) (``mode``: :func:`sparse_conv`)."""
        return conv_module_forward(self, feats, kernel_map, mode=mode)

    def extra_repr(self):
        """Channels, kind (subm / inverse / conv), kernel geometry and ``indice_key``."""
        kind = 'subm' if self.subm else ('inverse' if self.inverse else 'conv')
        return (f'{self.in_channels}, {self.out_channels}, kind={kind}, kernel_size={self.kernel_size}, '
                f'stride={self.stride}, padding={self.padding}, dilation={self.dilation}, '
                f'indice_key={self.indice_key!r}')


__all__ = ['PAIR_TILE', 'CHUNK_BYTES', 'KernelMap', 'sparse_conv', 'chunk_tiles', 'conv_module_forward',
           'pair_capacity', 'RulebookSparseConv3d']
