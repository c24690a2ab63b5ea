"""Padded kernel maps (pair lists) built outside or inside a fixed-shape graph.

A padded neighbour map (Vout, K) of :mod:`~fsdlite.models.layers.rulebook_conv` holds every kernel offset of
every output row, most of them the dump, so a dense gather-GEMM moves and multiplies several times more than the
real pairs need.  A *pair list* keeps only the real pairs, grouped by kernel offset into tiles of
:data:`~fsdlite.models.layers.sparse_conv.PAIR_TILE` rows (one offset per tile, the unused rows of a tile point
at the dump rows):

    pairs (3, P) int64:  pairs[0] input row (Vin = dump)   pairs[1] output row (Vout = dump)
                         pairs[2] kernel offset (the same for the rows of a tile; 0 in unused tiles)

:meth:`KernelMap.tiled <fsdlite.ops.sparse_conv.KernelMap.tiled>` reads it as the tiled layout of the
one kernel-map type, run by :func:`~fsdlite.models.layers.sparse_conv.sparse_conv` in standard ops.  The capacity
P comes from a bound on the real pairs (``max_pairs``); :func:`pairs_from_nbr` builds the list from a neighbour
map, :func:`pairs_from_exact` from the exact kernel map (the deploy pre-ops), and
:func:`traced_pairs` inside a graph; all report the pairs that did not fit.  Both builders can leave out one kernel
offset (``skip_offset``): a submanifold conv's centre, whose pairs are every row with itself and run as one plain
product instead (:attr:`KernelMap.identity_offset <fsdlite.ops.sparse_conv.KernelMap>`).
"""
import torch

from fsdlite.ops import RulebookPairs, rulebook_pairs
from fsdlite.structures.bounds import check_bound, is_exporting
from fsdlite.utils.constants import const

from .sparse_conv import PAIR_TILE, pair_capacity


def pairs_from_nbr(nbr, num_in, max_pairs, tile=PAIR_TILE, strict=None, bound_name='max_pairs', skip_offset=None):
    """Pair list of a padded neighbour map (eager, ``fsdlite.ops.rulebook_pairs``; the pre-ops of a deployed graph).

    Args:
        nbr (Tensor): (Vout, K) int64 input rows, ``num_in`` = dump.
        num_in (int): Vin, the input rows (dump index).
        max_pairs (int): bound on the real pairs; the list has :func:`pair_capacity` rows.
        tile (int): rows per tile.
        strict (bool, optional): raise ``BoundExceededError`` when the map has more than ``max_pairs`` pairs
            (default: eager mode); otherwise pairs that do not fit are dropped (highest offsets first) and counted.
        bound_name (str): name of the bound in that error.
        skip_offset (int, optional): a kernel offset whose pairs are left out (and not counted).
    Returns:
        RulebookPairs: the (3, P) list, the real pairs and the pairs placed (``num_dropped``: those that did not
        fit).
    """
    if nbr.dim() != 2 or nbr.dtype != torch.long:
        raise ValueError(f'pairs_from_nbr: nbr must be a (Vout, K) int64 tensor, got {tuple(nbr.shape)} {nbr.dtype}')
    if skip_offset is not None:
        nbr = without_offset_column(nbr, num_in, skip_offset)
    capacity = pair_capacity(max_pairs, nbr.shape[1], tile)
    if is_exporting():  # a map built inside the graph (in-graph rulebooks): fixed-shape compaction
        pairs, needed, placed = traced_pairs(nbr, int(num_in), capacity, tile)
    else:
        pairs, needed, placed = rulebook_pairs(nbr, int(num_in), capacity, tile)
    check_bound(needed, int(max_pairs), bound_name, strict=strict)
    return RulebookPairs(pairs, needed, placed)


def without_offset_column(nbr, num_in, offset):
    """(Vout, K) neighbour map ``nbr`` with column ``offset`` set to the dump ``num_in`` (standard ops: in a graph
    too)."""
    if not 0 <= int(offset) < nbr.shape[1]:
        raise ValueError(f'skip_offset must be a kernel offset in [0, {nbr.shape[1]}), got {offset}')
    offset = int(offset)
    dump = torch.full_like(nbr[:, :1], int(num_in))
    return torch.cat([nbr[:, :offset], dump, nbr[:, offset + 1:]], 1)


def pairs_from_exact(kernel_map, num_in, num_out, max_pairs, tile=PAIR_TILE, strict=None, bound_name='max_pairs',
                     skip_offset=None):
    """The pair list :func:`pairs_from_nbr` builds from a neighbour map, built from the same convolution's exact
    kernel map instead (``fsdlite.ops.subm_offset_pairs`` / ``conv_offset_pairs``: output rows ascending within an
    offset, as the neighbour map lists them), with no (Vout, K) map in between (the deploy pre-ops).

    Each offset's pairs are one contiguous run of the input and start its run of tiles in the list: a pair's
    row in the list is its column plus its offset's shift.

    Args:
        kernel_map (KernelMap): exact, ``pairs`` (2, P) int64 [input row; output row], ``offset_starts`` (K + 1,).
        num_in (int): Vin, the dump input row.
        num_out (int): Vout, the dump output row.
        max_pairs (int): bound on the real pairs; the list has :func:`pair_capacity` rows.
        tile (int): rows per tile.
        strict (bool, optional): raise ``BoundExceededError`` when there are more than ``max_pairs`` pairs
            (default: eager mode); otherwise the pairs that do not fit are dropped (highest offsets first) and
            counted, as :func:`pairs_from_nbr` does.
        bound_name (str): name of the bound in that error.
        skip_offset (int, optional): a kernel offset whose pairs are left out (and not counted).
    Returns:
        RulebookPairs: the (3, P) list, the real pairs and the pairs placed (``num_dropped``: those that did not
        fit).
    """
    pairs, starts = kernel_map.pairs, kernel_map.offset_starts
    if kernel_map.layout != 'exact':
        raise ValueError(f'pairs_from_exact: kernel_map must be exact, got a {kernel_map.layout} map')
    if (pairs.dim() != 2 or pairs.shape[0] != 2 or starts.dim() != 1 or starts.numel() < 2
            or pairs.dtype != torch.long or starts.dtype != torch.long):
        raise ValueError(f'pairs_from_exact: expected int64 pairs (2, P) and offset_starts (K + 1,) with '
                         f'K >= 1, got {pairs.dtype} {tuple(pairs.shape)} and {starts.dtype} {tuple(starts.shape)}')
    kv = starts.numel() - 1
    if skip_offset is not None:
        pairs, starts = _without_offset_pairs(pairs, starts, skip_offset)
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
    return RulebookPairs(out, needed, needed.new_tensor(placed))


def _without_offset_pairs(pairs, starts, offset):
    """Offset-grouped (2, P) ``pairs`` and (K + 1,) ``starts`` without the pairs of kernel offset ``offset``."""
    kv = starts.numel() - 1
    if not 0 <= int(offset) < kv:
        raise ValueError(f'skip_offset must be a kernel offset in [0, {kv}), got {offset}')
    begin, end = int(starts[offset]), int(starts[offset + 1])
    shift = torch.zeros_like(starts)
    shift[offset + 1:] = end - begin
    return torch.cat([pairs[:, :begin], pairs[:, end:]], 1), starts - shift


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


__all__ = ['pairs_from_nbr', 'pairs_from_exact', 'without_offset_column', 'traced_pairs']
