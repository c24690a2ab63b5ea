"""The sparse-convolution functional and its one pair format, :class:`KernelMap`.

A kernel map lists the (input row, output row) pairs of one sparse convolution grouped by kernel offset (offset
``k`` in ``itertools.product`` order of the kernel, spconv's weight order). It comes in two forms of the same
type:

* **exact** -- ``offset_starts`` (K + 1,) marks where each offset's pairs start; no padding, output rows ascending
  within an offset (``fsdlite.ops.subm_offset_pairs`` / ``conv_offset_pairs`` / ``pairs_by_offset``). Run by
  fsdlite's fused kernels (``fsdlite.ops.sparse_conv``, CPU and CUDA, forward and backward).
* **padded** -- a fixed capacity of ``P`` pairs in tiles of ``tile`` rows, one kernel offset per tile
  (``tile_offsets``); unused rows point at the dump rows (input ``num_in``, output ``num_out``). Run as a
  gather-GEMM-scatter of standard ops (the export form: Gather / MatMul / ScatterND(add), static shapes).

:func:`sparse_conv` picks the backend from the form. Weights are the (K, Cin, Cout) matrices of
:func:`kernel_matrices` (spconv's ``(Cout, kz, ky, kx, Cin)`` weight, unchanged in the modules);
:func:`conv_module_forward` runs an spconv layer (or ``RulebookSparseConv3d``) on a kernel map.
"""
from typing import NamedTuple, Optional

import torch

import fsdlite.ops as fsdlite_ops
from fsdlite.structures.padded import with_dump_row

from .rulebook_conv import conv_geometry, kernel_matrices
from .static_ops import check_index

PAIR_TILE = 128  #: rows per tile of a padded map (one kernel offset each); larger tiles copy fewer weights


class KernelMap(NamedTuple):
    """Offset-grouped (input row, output row) pairs of one sparse convolution, exact or padded (module docstring).

    Build with :meth:`exact` or :meth:`padded`; exactly one of ``offset_starts`` and ``tile_offsets`` is set.
    """
    pairs: torch.Tensor                   #: (2, P) int64 [input row; output row], grouped by kernel offset
    offset_starts: Optional[torch.Tensor]  #: exact: (K + 1,) int64 first pair of each offset (last = P)
    tile_offsets: Optional[torch.Tensor]   #: padded: (P // tile,) int64 kernel offset of each tile
    num_in: int                            #: input rows Vin (the input dump row of a padded map)
    num_out: int                           #: output rows Vout (the output dump row of a padded map)

    @classmethod
    def exact(cls, offset_pairs, num_in, num_out):
        """An exact map from ``(pairs (2, P), offset_starts (K + 1,))`` (``fsdlite.ops.OffsetPairs``)."""
        pairs, starts = offset_pairs
        return cls(pairs, starts, None, int(num_in), int(num_out))

    @classmethod
    def padded(cls, pair_list, num_in, num_out, tile=PAIR_TILE):
        """A padded map from a (3, P) int64 tile list ``[input row; output row; kernel offset]`` (P a multiple of
        ``tile``, the offset constant within a tile: ``fsdlite.ops.rulebook_pairs``, :func:`pair_list_from_exact`).
        Works inside an exported graph (slices only)."""
        if pair_list.dim() != 2 or pair_list.shape[0] != 3 or pair_list.shape[1] % tile:
            raise ValueError(f'KernelMap.padded: the pair list must have shape (3, P) with P a multiple of {tile}, '
                             f'got {tuple(pair_list.shape)}')
        return cls(pair_list[:2], None, pair_list[2].view(-1, tile)[:, 0], int(num_in), int(num_out))

    @property
    def is_padded(self):
        """True for the padded (export) form."""
        return self.tile_offsets is not None

    @property
    def tile(self):
        """Rows per tile of a padded map."""
        return self.pairs.shape[1] // self.tile_offsets.shape[0]

    def transposed(self):
        """The map of the inverse convolution: input and output rows swapped, the same offsets.

        An exact map must list its input rows ascending within an offset (true of the strided convs'
        ``conv_offset_pairs``), so the swapped pairs keep the output order the fused kernels need.
        """
        return self._replace(pairs=self.pairs.flip(0), num_in=self.num_out, num_out=self.num_in)


def sparse_conv(x, kernel_map, weight, bias=None):
    """Sparse convolution ``out[o] = sum over pairs (i, o) of offset k of x[i] @ weight[k] (+ bias)``.

    Backend by the map's form: exact -> ``fsdlite.ops.sparse_conv`` (fused, CPU/CUDA, differentiable); padded ->
    gather-GEMM-scatter in standard ops (exportable).

    Args:
        x (Tensor): (Vin, Cin) input rows (padding rows allowed: a padded map never reads them).
        kernel_map (KernelMap): the convolution's pairs.
        weight (Tensor): (K, Cin, Cout) one matrix per kernel offset (:func:`kernel_matrices`).
        bias (Tensor, optional): (Cout,).
    Returns:
        Tensor: (num_out, Cout); rows without pairs hold the bias (or 0).
    """
    if not kernel_map.is_padded:
        return fsdlite_ops.sparse_conv(x, weight, kernel_map.pairs, kernel_map.offset_starts, kernel_map.num_out,
                                       bias=bias)
    cin, cout = weight.shape[1], weight.shape[2]
    if x.dim() != 2 or x.shape[1] != cin:
        raise ValueError(f'sparse_conv: x must have shape (Vin, {cin}), got {tuple(x.shape)}')
    pairs, num_out, tile = kernel_map.pairs, kernel_map.num_out, kernel_map.tile
    check_index('sparse_conv: kernel_map.pairs[0] (input rows)', pairs[0], 0, x.shape[0] + 1)
    check_index('sparse_conv: kernel_map.pairs[1] (output rows)', pairs[1], 0, num_out + 1)
    check_index('sparse_conv: kernel_map.tile_offsets', kernel_map.tile_offsets, 0, weight.shape[0])
    num_tiles = kernel_map.tile_offsets.shape[0]
    gathered = with_dump_row(x).index_select(0, pairs[0]).view(num_tiles, tile, cin)
    z = torch.bmm(gathered, weight.index_select(0, kernel_map.tile_offsets)).view(-1, cout)
    out = x.new_zeros(num_out + 1, cout).index_add(0, pairs[1], z)[:num_out]
    return out if bias is None else out + bias


def conv_module_forward(module, x, kernel_map):
    """Run an spconv ``SubMConv3d`` / ``SparseConv3d`` / ``SparseInverseConv3d`` (or a ``RulebookSparseConv3d``)
    on (Vin, Cin) features over its kernel map, its weight and bias unchanged -> (num_out, Cout)."""
    matrices = kernel_matrices(module.weight, conv_geometry(module).one_by_one)
    return sparse_conv(x, kernel_map, matrices, module.bias)


def pair_capacity(max_pairs, kernel_volume, tile=PAIR_TILE):
    """Rows of a padded map that holds any ``max_pairs`` real pairs of a K-offset convolution: each offset wastes
    at most ``tile - 1`` rows of its last tile, so ``round_up(max_pairs + K * (tile - 1), tile)``."""
    if int(max_pairs) < 1 or int(kernel_volume) < 1:
        raise ValueError(f'pair_capacity: max_pairs and kernel_volume must be >= 1, got {max_pairs}, {kernel_volume}')
    rows = int(max_pairs) + int(kernel_volume) * (tile - 1)
    return -(-rows // tile) * tile


__all__ = ['PAIR_TILE', 'KernelMap', 'sparse_conv', 'conv_module_forward', 'pair_capacity']
