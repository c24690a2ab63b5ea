"""Pure-torch reference of the rulebook family (sorted keys + binary search), for tests and benchmarks."""
import itertools
from typing import NamedTuple

import torch

from ..sparse_conv.reference import pairs_by_offset_reference


class ConvRulebook(NamedTuple):
    """Result of :func:`fsdlite.ops.rulebook_conv` and its export form (all int64, on the device of ``coors``)."""
    out_coors: torch.Tensor      #: (max_out, 4) [b, z, y, x] sorted by key; padding rows are 0
    num_valid_out: torch.Tensor  #: () output voxels kept (<= max_out)
    num_dropped: torch.Tensor    #: () output voxels beyond max_out (dropped, counted)
    nbr: torch.Tensor            #: (max_out, K) rows of coors; Vmax (dump) where no neighbour or padding


def kernel_offsets(kernel_size):
    """(K, 3) int64 kernel indices (kz, ky, kx) in itertools.product order (spconv's weight order)."""
    return torch.tensor(list(itertools.product(*(range(k) for k in kernel_size))), dtype=torch.long).view(-1, 3)


def conv_output_shape(spatial_shape, kernel_size, stride, padding, dilation):
    """Output grid ``(oz, oy, ox)`` of a strided conv: ``(n + 2p - d (k - 1) - 1) // s + 1`` per axis."""
    return tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                 for n, k, s, p, d in zip(spatial_shape, kernel_size, stride, padding, dilation))


def grid_keys(bzyx, shape):
    """int64 key ``((b * nz + z) * ny + y) * nx + x`` of ``[b, z, y, x]`` rows (..., 4) on a grid (nz, ny, nx)."""
    return ((bzyx[..., 0] * shape[0] + bzyx[..., 1]) * shape[1] + bzyx[..., 2]) * shape[2] + bzyx[..., 3]


def _lookup(coors, num_valid, shape, cells, dump):
    """Rows of ``coors[:num_valid]`` at ``cells`` (..., 4) (``dump`` where absent or outside ``shape``)."""
    dumps = torch.full(cells.shape[:-1], dump, dtype=torch.long)
    if num_valid == 0:
        return dumps
    keys = grid_keys(coors[:num_valid], shape)
    order = torch.argsort(keys)
    sorted_keys = keys[order]
    inside = ((cells[..., 1:] >= 0) & (cells[..., 1:] < torch.tensor(shape))).all(-1)
    query = grid_keys(cells, shape)
    pos = torch.searchsorted(sorted_keys, query).clamp(max=num_valid - 1)
    return torch.where(inside & (sorted_keys[pos] == query), order[pos], dumps)


def rulebook_subm_reference(coors, num_valid, spatial_shape, kernel_size, dilation):
    """(Vmax, K) submanifold neighbour map (dump ``Vmax``); see :func:`fsdlite.ops.rulebook_subm`."""
    coors = coors.long()
    vmax = coors.shape[0]
    offsets = (kernel_offsets(kernel_size) - torch.tensor(kernel_size) // 2) * torch.tensor(dilation)
    cells = coors[:, None, :].repeat(1, offsets.shape[0], 1)
    cells[..., 1:] += offsets
    nbr = _lookup(coors, int(num_valid), spatial_shape, cells, vmax)
    nbr[int(num_valid):] = vmax
    return nbr


def rulebook_conv_reference(coors, num_valid, spatial_shape, kernel_size, stride, padding, dilation, max_out):
    """Strided-conv rulebook ``(out_coors, num_valid_out, num_dropped, nbr)``; see :func:`fsdlite.ops.rulebook_conv`."""
    coors = coors.long()
    n = int(num_valid)
    vmax = coors.shape[0]
    out_shape = conv_output_shape(spatial_shape, kernel_size, stride, padding, dilation)
    kidx = kernel_offsets(kernel_size)
    s, p, d = (torch.tensor(v) for v in (stride, padding, dilation))
    t = coors[:n, None, 1:] + p - kidx * d                       # (n, K, 3): o * s for a valid pair
    ok = ((t >= 0) & (t % s == 0) & (t // s < torch.tensor(out_shape))).all(-1)
    cand = torch.cat([coors[:n, None, :1].expand(-1, kidx.shape[0], 1), t // s], -1)[ok]
    keys = torch.unique(grid_keys(cand, out_shape))                 # sorted
    total = keys.numel()
    kept = min(total, max_out)
    out = torch.zeros(max_out, 4, dtype=torch.long)
    k = keys[:kept]
    out[:kept, 3] = k % out_shape[2]
    out[:kept, 2] = k // out_shape[2] % out_shape[1]
    out[:kept, 1] = k // (out_shape[2] * out_shape[1]) % out_shape[0]
    out[:kept, 0] = k // (out_shape[2] * out_shape[1] * out_shape[0])
    cells = out[:, None, :].repeat(1, kidx.shape[0], 1)
    cells[..., 1:] = cells[..., 1:] * s - p + kidx * d
    nbr = _lookup(coors, n, spatial_shape, cells, vmax)
    nbr[kept:] = vmax
    return out, torch.tensor(kept), torch.tensor(total - kept), nbr


def rulebook_inverse_reference(nbr, num_rows):
    """(num_rows, K) inverse map of a strided-conv map ``nbr`` (dump ``nbr.shape[0]``)."""
    num_out, kv = nbr.shape
    inv = torch.full((num_rows + 1, kv), num_out, dtype=torch.long)
    rows = torch.arange(num_out).view(-1, 1).expand(-1, kv)
    for k in range(kv):
        hit = nbr[:, k] < num_rows
        inv[nbr[hit, k], k] = rows[hit, k]
    return inv[:num_rows]


def rulebook_pairs_reference(nbr, num_in, capacity, tile):
    """(3, capacity) pair list, real pairs and placed pairs of a map ``nbr`` (dump ``num_in``), pure torch."""
    vout, kv = nbr.shape
    k_idx, out_idx = (nbr < num_in).t().nonzero(as_tuple=True)  # offset-major, then output row
    in_idx = nbr[out_idx, k_idx]
    count = torch.bincount(k_idx, minlength=kv)
    tiles = (count + tile - 1) // tile
    first_tile = torch.cumsum(tiles, 0) - tiles
    first_pair = torch.cumsum(count, 0) - count
    pos = first_tile[k_idx] * tile + torch.arange(k_idx.numel()) - first_pair[k_idx]
    keep = pos < capacity
    pairs = torch.empty(3, capacity, dtype=torch.long)
    pairs[0], pairs[1] = num_in, vout
    pairs[0, pos[keep]], pairs[1, pos[keep]] = in_idx[keep], out_idx[keep]
    tile_offset = torch.repeat_interleave(torch.arange(kv), tiles)[:capacity // tile]
    tile_offset = torch.cat([tile_offset, tile_offset.new_zeros(capacity // tile - tile_offset.numel())])
    pairs[2] = tile_offset.repeat_interleave(tile)
    return pairs, torch.tensor(k_idx.numel()), keep.sum()


def subm_offset_pairs_reference(coors, spatial_shape, kernel_size, dilation):
    """``(pairs, offset_starts)`` of :func:`fsdlite.ops.subm_offset_pairs` (every row valid)."""
    n = coors.shape[0]
    return pairs_by_offset_reference(rulebook_subm_reference(coors, n, spatial_shape, kernel_size, dilation), n)


def conv_offset_pairs_reference(coors, spatial_shape, kernel_size, stride, padding, dilation):
    """``(out_coors, pairs, offset_starts)`` of :func:`fsdlite.ops.conv_offset_pairs` (every row valid)."""
    n = coors.shape[0]
    bound = n * kernel_offsets(kernel_size).shape[0]  # every (input, offset) pair could make its own output
    out, kept, _, nbr = rulebook_conv_reference(coors, n, spatial_shape, kernel_size, stride, padding, dilation, bound)
    kept = int(kept)
    return (out[:kept], *pairs_by_offset_reference(nbr[:kept], n))
