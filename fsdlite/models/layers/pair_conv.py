"""Pair-list sparse convolution: gather-GEMM-scatter over the existing pairs only, with fixed shapes.

A padded neighbour map (Vout, K) of :mod:`~fsdlite.models.layers.rulebook_conv` holds every kernel offset of
every output row, most of them the dump (on a KITTI frame 14 % of a first-stage UNet map is real pairs), so a
dense gather-GEMM moves and multiplies ~7x more than spconv does.  A *pair list* keeps only the real pairs,
grouped by kernel offset into tiles of :data:`PAIR_TILE` rows (one offset per tile, the unused rows of a tile
point at the dump row):

    pairs (3, P) int64:  pairs[0] input row (Vin = dump)   pairs[1] output row (Vout = dump)
                         pairs[2] kernel offset (the same for the PAIR_TILE rows of a tile; 0 in unused tiles)

and the convolution is, with the P = nt * PAIR_TILE pairs as nt tiles,

    z[t] = x_pad[pairs[0, t]] @ W[k_t]        (nt, PAIR_TILE, Cin) @ (nt, Cin, Cout)   batched GEMM
    out  = index_add(zeros(Vout + 1, Cout), pairs[1], z)[:Vout] + bias                   row scatter-add

which exports to standard ONNX Gather / MatMul / ScatterND(add) with static shapes (ORT runs the row-wise
ScatterND fast, unlike an element-wise ScatterElements).  The capacity P comes from a bound on the real pairs
(``max_pairs``); :func:`pairs_from_nbr` builds the list from a neighbour map, :func:`pairs_from_offset_pairs` from
the exact offset-grouped pairs (the deploy pre-ops), both outside the graph, and report pairs that did not fit.
Same sums as :func:`~fsdlite.models.layers.rulebook_conv.rulebook_conv` (up to float summation order); spconv's
weights are used unchanged.
"""
from typing import NamedTuple

import torch

from fsdlite.ops import rulebook_pairs
from fsdlite.structures.bounds import check_bound, is_exporting
from fsdlite.structures.padded import with_dump_row
from fsdlite.utils.constants import const

from .rulebook_conv import conv_geometry, kernel_matrices
from .static_ops import check_index

PAIR_TILE = 128  #: rows per tile (one kernel offset each); larger tiles copy fewer weights, pad more rows


def pair_capacity(max_pairs, kernel_volume, tile=PAIR_TILE):
    """Rows of a pair list that holds any ``max_pairs`` real pairs of a K-offset map: each offset wastes at most
    ``tile - 1`` rows of its last tile, so ``round_up(max_pairs + K * (tile - 1), tile)``."""
    if int(max_pairs) < 1 or int(kernel_volume) < 1:
        raise ValueError(f'pair_capacity: max_pairs and kernel_volume must be >= 1, got {max_pairs}, {kernel_volume}')
    rows = int(max_pairs) + int(kernel_volume) * (tile - 1)
    return -(-rows // tile) * tile


class PairList(NamedTuple):
    """Result of :func:`pairs_from_nbr`."""
    pairs: torch.Tensor    #: (3, P) int64 input row, output row, kernel offset (see the module docstring)
    needed: torch.Tensor   #: () int64 real pairs of the map
    dropped: torch.Tensor  #: () int64 pairs that did not fit into P rows (0 unless the bound was exceeded)


def pairs_from_nbr(nbr, num_in, max_pairs, tile=PAIR_TILE, strict=None, bound_name='max_pairs'):
    """Pair list of a padded neighbour map (eager, ``fsdlite.ops.rulebook_pairs``; the pre-ops of a deployed graph).

    Args:
        nbr (Tensor): (Vout, K) int64 input rows, ``num_in`` = dump.
        num_in (int): Vin, the input rows (dump index).
        max_pairs (int): bound on the real pairs; the list has :func:`pair_capacity` rows.
        tile (int): rows per tile.
        strict (bool, optional): raise ``BoundExceededError`` when the map has more than ``max_pairs`` pairs
            (default: eager mode); otherwise pairs that do not fit are dropped (highest offsets first) and counted.
        bound_name (str): name of the bound in that error.
    Returns:
        PairList
    """
    if nbr.dim() != 2 or nbr.dtype != torch.long:
        raise ValueError(f'pairs_from_nbr: nbr must be a (Vout, K) int64 tensor, got {tuple(nbr.shape)} {nbr.dtype}')
    capacity = pair_capacity(max_pairs, nbr.shape[1], tile)
    if is_exporting():  # a map built inside the graph (in-graph rulebooks): fixed-shape compaction
        pairs, needed, placed = traced_pairs(nbr, int(num_in), capacity, tile)
    else:
        pairs, needed, placed = rulebook_pairs(nbr, int(num_in), capacity, tile)
    check_bound(needed, int(max_pairs), bound_name, strict=strict)
    return PairList(pairs, needed, needed - placed)


def pairs_from_offset_pairs(offset_pairs, num_in, num_out, max_pairs, tile=PAIR_TILE, strict=None,
                            bound_name='max_pairs'):
    """The pair list :func:`pairs_from_nbr` builds from a neighbour map, built from the same convolution's
    offset-grouped pairs instead (``fsdlite.ops.subm_offset_pairs`` / ``conv_offset_pairs``: output rows ascending
    within an offset, as the map lists them), with no (Vout, K) map in between (the deploy pre-ops).

    Each offset's pairs are one contiguous run of the input and start its run of tiles in the list: a pair's
    row in the list is its column plus its offset's shift.

    Args:
        offset_pairs (tuple): ``(pairs (2, P) int64 [input row; output row], offset_starts (K + 1,) int64)``.
        num_in (int): Vin, the dump input row.
        num_out (int): Vout, the dump output row.
        max_pairs (int): bound on the real pairs; the list has :func:`pair_capacity` rows.
        tile (int): rows per tile.
        strict (bool, optional): raise ``BoundExceededError`` when there are more than ``max_pairs`` pairs
            (default: eager mode); otherwise the pairs that do not fit are dropped (highest offsets first) and
            counted, as :func:`pairs_from_nbr` does.
        bound_name (str): name of the bound in that error.
    Returns:
        PairList
    """
    pairs, starts = offset_pairs
    if (pairs.dim() != 2 or pairs.shape[0] != 2 or starts.dim() != 1 or starts.numel() < 2
            or pairs.dtype != torch.long or starts.dtype != torch.long):
        raise ValueError(f'pairs_from_offset_pairs: expected int64 pairs (2, P) and offset_starts (K + 1,) with '
                         f'K >= 1, got {pairs.dtype} {tuple(pairs.shape)} and {starts.dtype} {tuple(starts.shape)}')
    kv = starts.numel() - 1
    capacity = pair_capacity(max_pairs, kv, tile)
    counts = starts[1:] - starts[:-1]
    tiles = torch.div(counts + (tile - 1), tile, rounding_mode='floor')
    first_row = (torch.cumsum(tiles, 0) - tiles) * tile                  # of each offset's tiles
    dest = torch.arange(pairs.shape[1], device=pairs.device) + torch.repeat_interleave(first_row - starts[:-1], counts)
    placed = int(torch.searchsorted(dest, capacity))                    # dest ascends: the pairs that fit lead
    out = torch.empty((3, capacity), dtype=torch.long, device=pairs.device)
    out[0].fill_(int(num_in))
    out[1].fill_(int(num_out))
    out[:2].index_copy_(1, dest[:placed], pairs[:, :placed])
    tile_offset = torch.repeat_interleave(torch.arange(kv, device=pairs.device), tiles)[:capacity // tile]
    out[2, :tile_offset.numel() * tile] = tile_offset.repeat_interleave(tile)
    out[2, tile_offset.numel() * tile:] = 0  # tiles no offset uses
    needed = counts.sum()
    check_bound(needed, int(max_pairs), bound_name, strict=strict)
    return PairList(out, needed, needed - placed)


def traced_pairs(nbr, num_in, capacity, tile=PAIR_TILE):
    """``fsdlite.ops.rulebook_pairs`` with fixed shapes and standard ops only (for maps built inside a graph):
    ranks by a cumulative sum per offset, one row-wise scatter of ``[input, output]`` into a discarded extra row.

    Returns:
        tuple: (3, capacity) pairs, () real pairs, () placed pairs -- the op's results exactly.
    """
    vout, kv = nbr.shape
    nbr_t = nbr.t()                                                    # (K, Vout), offset-major
    real = nbr_t < num_in
    rank = torch.cumsum(real.long(), 1)                                # 1 + rank of each real pair in its offset
    count = rank[:, -1] if vout else rank.new_zeros(kv)                # (no separate reductions over (K, Vout))
    tiles = torch.div(count + (tile - 1), tile, rounding_mode='floor')
    tile_end = torch.cumsum(tiles, 0)
    first = (tile_end - tiles) * tile                                  # row of each offset's first tile
    pos = first.view(-1, 1) + rank - 1
    placed = real & (pos < capacity)
    pos = torch.where(placed, pos, torch.full_like(pos, capacity)).reshape(-1)
    rows = torch.arange(vout, device=nbr.device).view(1, -1).expand(kv, vout)
    values = torch.stack([nbr_t.reshape(-1), rows.reshape(-1)], 1)        # (K * Vout, 2) [input, output]
    dumps = const([int(num_in), int(vout)], device=nbr.device).view(1, 2)
    io = dumps.expand(capacity + 1, 2).clone().index_put_((pos,), values)[:capacity].t()
    num_tiles = capacity // tile
    tile_offset = (tile_end.view(1, -1) <= torch.arange(num_tiles, device=nbr.device).view(-1, 1)).sum(1)
    tile_offset = torch.where(tile_offset < kv, tile_offset, torch.zeros_like(tile_offset))
    offsets = tile_offset.view(-1, 1).expand(num_tiles, tile).reshape(1, -1)
    return torch.cat([io, offsets], 0), count.sum(), torch.minimum((capacity - first).clamp(min=0), count).sum()


def pair_conv(feats, pairs, weight, num_out, bias=None, one_by_one=False, tile=PAIR_TILE):
    """Sparse convolution over a pair list (see the module docstring).

    Args:
        feats (Tensor): (Vin, Cin) input features (padding rows allowed: never referenced).
        pairs (Tensor): (3, P) int64 pair list of :func:`pairs_from_nbr` (P a multiple of ``tile``).
        weight (Tensor): (Cout, kz, ky, kx, Cin) spconv layout.
        num_out (int): Vout, the output rows.
        bias (Tensor, optional): (Cout,).
        one_by_one (bool): spconv's 1x1 path.
        tile (int): rows per tile (as used by :func:`pairs_from_nbr`).
    Returns:
        Tensor: (Vout, Cout); rows without pairs hold the bias (or 0).
    """
    cout, cin = weight.shape[0], weight.shape[-1]
    if feats.dim() != 2 or feats.shape[1] != cin:
        raise ValueError(f'pair_conv: feats must have shape (Vin, {cin}), got {tuple(feats.shape)}')
    if pairs.dim() != 2 or pairs.shape[0] != 3 or pairs.shape[1] % tile:
        raise ValueError(f'pair_conv: pairs must have shape (3, P) with P a multiple of {tile}, got '
                         f'{tuple(pairs.shape)}')
    w = kernel_matrices(weight, one_by_one)
    check_index('pair_conv: pairs[0] (input rows)', pairs[0], 0, feats.shape[0] + 1)
    check_index('pair_conv: pairs[1] (output rows)', pairs[1], 0, int(num_out) + 1)
    check_index('pair_conv: pairs[2] (kernel offsets)', pairs[2], 0, w.shape[0])
    num_tiles = pairs.shape[1] // tile
    x = with_dump_row(feats)
    gathered = x.index_select(0, pairs[0]).view(num_tiles, tile, cin)
    w_tiles = w.index_select(0, pairs[2].view(num_tiles, tile)[:, 0])
    z = torch.bmm(gathered, w_tiles).view(-1, cout)
    out = feats.new_zeros(int(num_out) + 1, cout).index_add(0, pairs[1], z)[:int(num_out)]
    return out if bias is None else out + bias


def pair_conv_forward(module, feats, pairs, num_out):
    """Run an spconv conv layer (or ``RulebookSparseConv3d``) on padded features via its pair list.

    Args:
        module: spconv ``SubMConv3d`` / ``SparseConv3d`` / ``SparseInverseConv3d`` or RulebookSparseConv3d.
        feats (Tensor): (Vin_max, Cin) padded input features.
        pairs (Tensor): (3, P) pair list of this layer (:func:`pairs_from_nbr`).
        num_out (int): Vout_max, the output rows.
    Returns:
        Tensor: (Vout_max, Cout) output features (bias in rows without pairs).
    """
    return pair_conv(feats, pairs, module.weight, num_out, module.bias, one_by_one=conv_geometry(module).one_by_one)


__all__ = ['PAIR_TILE', 'pair_capacity', 'PairList', 'pairs_from_nbr', 'pairs_from_offset_pairs', 'traced_pairs',
           'pair_conv', 'pair_conv_forward']
