"""The rulebook ops' export form: neighbour maps built inside a fixed-shape graph (pure torch, standard ONNX).

:class:`GraphRulebookOps` has the signatures and results of :func:`rulebook_subm`, :func:`rulebook_conv` and
:func:`rulebook_inverse` (tested against them) for voxels that are themselves computed inside the graph, e.g.
FSDv2's virtual voxels feeding the mixer UNet, or FSD's cells linked into clusters.  Lookups go through a
**dense key table** of the grid (``batch_size * nz * ny * nx + 1`` slots, the last one a dump): a ScatterElements
to fill it and Gathers to read it, no sort, no ``unique``, no ``nonzero``; memory O(grid) per level.  A strided
conv's output voxels come out sorted by ``(b, z, y, x)`` like the C++ op (a cumulative sum over the table's
occupancy), so the maps are identical to the op's.

Pass an instance as ``ops=`` to :func:`fsdlite.models.layers.rulebook_conv.build_rulebook`.
"""
import math

import torch

from .._checks import is_exporting
from .reference import ConvRulebook, conv_output_shape, grid_keys, kernel_offsets


def _valid_mask(num_valid, size, device):
    """(size,) bool: rows ``< num_valid`` (an int or a 0-d tensor)."""
    if isinstance(num_valid, torch.Tensor):
        return torch.arange(size, device=device) < num_valid.reshape(())
    return torch.arange(size, device=device) < int(num_valid)


def _const(values, device):
    """An int64 constant of the graph."""
    return torch.tensor(values, dtype=torch.long, device=device)


def _triple(value):
    return [int(value)] * 3 if isinstance(value, int) else [int(v) for v in value]


def _reaching_taps(c, k, s, p, d):
    """(V, M) kernel taps ``kk`` (< k) of one axis through which coordinate ``c`` (V,) reaches an output cell of a
    stride-``s`` conv (``c + p - kk * d`` a multiple of ``s``), ascending, -1 where there are fewer than
    ``M = ceil(k / (s / gcd(d, s)))``; whether the output cell exists is checked by the caller."""
    period = s // math.gcd(d, s)  # taps reaching outputs repeat with this period
    first = [next((kk for kk in range(min(period, k)) if (r - kk * d) % s == 0), -1) for r in range(s)]
    kk0 = _const(first, c.device).index_select(0, torch.remainder(c + p, s))  # smallest tap, -1: none
    kk = kk0[:, None] + period * torch.arange(-(-k // period), device=c.device)[None, :]
    return torch.where((kk0[:, None] >= 0) & (kk < k), kk, torch.full_like(kk, -1))


class GraphRulebookOps:
    """Export-safe ``rulebook_subm`` / ``rulebook_conv`` / ``rulebook_inverse`` over a dense key table.

    Args:
        batch_size (int): B; valid voxels have ``b`` in ``[0, B)`` (part of the key space).
    """

    def __init__(self, batch_size):
        if isinstance(batch_size, bool) or int(batch_size) < 1:
            raise ValueError(f'GraphRulebookOps: batch_size must be a positive int, got {batch_size!r}')
        self.batch_size = int(batch_size)

    def _key_space(self, shape):
        return self.batch_size * math.prod(shape)

    def _check(self, coors, valid, shape):
        if coors.dim() != 2 or coors.shape[1] != 4:
            raise ValueError(f'GraphRulebookOps: coors must be (Vmax, 4) [b, z, y, x], got {tuple(coors.shape)}')
        if is_exporting() or not coors.shape[0]:
            return
        top = torch.tensor([self.batch_size, *shape], device=coors.device)
        bad = valid[:, None] & ((coors < 0) | (coors >= top))
        if bool(bad.any()):
            row = int(bad.any(1).long().argmax())
            raise ValueError(f'GraphRulebookOps: coors[{row}] = {coors[row].tolist()} lies outside batch_size '
                             f'{self.batch_size} x spatial_shape {tuple(shape)}')

    def _table(self, coors, valid, shape):
        """(G + 1,) row of each occupied key; Vmax (dump) elsewhere and in the dump slot G."""
        vmax, g = coors.shape[0], self._key_space(shape)
        keys = torch.where(valid, grid_keys(coors, shape), torch.full_like(coors[:, 0], g))
        rows = torch.arange(vmax, device=coors.device)
        rows = torch.where(valid, rows, torch.full_like(rows, vmax))  # every dump write stores the same value
        return torch.full((g + 1,), vmax, dtype=torch.long, device=coors.device).scatter(0, keys, rows)

    def neighbour_rows(self, coors, valid, spatial_shape, offsets, halo):
        """Rows of the valid voxels at ``coors + offsets[k]`` (the dump ``Vmax`` where there is none).

        The key table covers the grid grown by ``halo`` cells on both sides of every axis, so a neighbour key is
        the voxel's key plus a constant per offset (one broadcast add, no per-axis range test: cells outside the
        grid land in the never-occupied halo).

        Args:
            coors (Tensor): (Vmax, 4) int64 ``[b, z, y, x]`` (rows with ``valid`` inside the grid).
            valid (Tensor): (Vmax,) bool voxels in the table; other rows get the dump in every column.
            spatial_shape (Sequence[int]): grid (nz, ny, nx).
            offsets (Tensor): (K, 3) int64 (dz, dy, dx) with ``|d| <= halo`` per axis.
            halo (Sequence[int]): (hz, hy, hx) Python ints (graph constants).
        Returns:
            Tensor: (Vmax, K) int64.
        """
        vmax, device = coors.shape[0], coors.device
        halo = [int(h) for h in halo]
        grown = tuple(int(n) + 2 * h for n, h in zip(spatial_shape, halo))
        shifted = coors.long() + _const([0, *halo], device)
        table = self._table(shifted, valid, grown)
        step = _const([grown[1] * grown[2], grown[2], 1], device)
        keys = grid_keys(shifted, grown).view(-1, 1) + (offsets.long() * step).sum(1).view(1, -1)
        keys = torch.where(valid[:, None], keys, torch.full_like(keys, table.shape[0] - 1))
        return table.index_select(0, keys.reshape(-1)).view(vmax, offsets.shape[0])

    def rulebook_subm(self, coors, num_valid, spatial_shape, kernel_size=3, dilation=1):
        """(Vmax, K) submanifold map, as :func:`fsdlite.ops.rulebook_subm`."""
        shape, k, d = tuple(int(v) for v in spatial_shape), _triple(kernel_size), _triple(dilation)
        coors = coors.long()
        vmax = coors.shape[0]
        valid = _valid_mask(num_valid, vmax, coors.device)
        self._check(coors, valid, shape)
        offsets = kernel_offsets(k).to(coors.device) - _const(list(k), coors.device) // 2
        offsets = offsets * _const(list(d), coors.device)
        return self.neighbour_rows(coors, valid, shape, offsets, [(kk // 2) * dd for kk, dd in zip(k, d)])

    def rulebook_conv(self, coors, num_valid, spatial_shape, kernel_size, stride=1, padding=0, dilation=1, *,
                      max_out):
        """Strided-conv rulebook (outputs sorted by key, padded to ``max_out``) as :func:`fsdlite.ops.rulebook_conv`."""
        shape = tuple(int(v) for v in spatial_shape)
        k, s, p, d = _triple(kernel_size), _triple(stride), _triple(padding), _triple(dilation)
        out_shape = tuple(conv_output_shape(shape, k, s, p, d))
        coors, max_out = coors.long(), int(max_out)
        vmax, device = coors.shape[0], coors.device
        valid = _valid_mask(num_valid, vmax, device)
        self._check(coors, valid, shape)
        kv = math.prod(k)
        # Per axis only the kernel taps that can reach an output (kk * d = c + p mod s: at most
        # ceil(k / (s / gcd(d, s))), 2 of 3 for k3 s2), so (V, M) candidates instead of (V, K): 8, not 27, for k3 s2.
        ok, keys, tap = valid[:, None], coors[:, :1], torch.zeros_like(coors[:, :1])
        for axis in range(3):
            kk = _reaching_taps(coors[:, axis + 1], k[axis], s[axis], p[axis], d[axis])  # (V, M_axis), -1: none
            t = coors[:, axis + 1:axis + 2] + p[axis] - kk * d[axis]               # = o * stride where kk is real
            q = torch.div(t, s[axis], rounding_mode='floor')                    # output cell on this axis
            hit = (kk >= 0) & (t >= 0) & (q < out_shape[axis])
            m = ok.shape[1] * kk.shape[1]                                       # candidates: all combinations
            ok = (ok[:, :, None] & hit[:, None, :]).reshape(vmax, m)
            keys = (keys[:, :, None] * out_shape[axis] + q[:, None, :]).reshape(vmax, m)
            tap = (tap[:, :, None] * k[axis] + kk.clamp(min=0)[:, None, :]).reshape(vmax, m)
        g = self._key_space(out_shape)
        oz, oy, ox = out_shape
        okey = torch.where(ok, keys, torch.full_like(keys, g))
        present = torch.zeros(g + 1, dtype=torch.long, device=device).scatter(
            0, okey.reshape(-1), torch.ones_like(okey.reshape(-1)))[:g]
        rank = torch.cumsum(present, 0) - 1                                         # sorted position of each key
        total = present.sum()
        slot = torch.where((present > 0) & (rank < max_out), rank, torch.full_like(rank, max_out))
        out_keys = torch.zeros(max_out + 1, dtype=torch.long, device=device).scatter(
            0, slot, torch.arange(g, device=device))[:max_out]
        kept = torch.clamp(total, max=max_out)
        out_keys = torch.where(_valid_mask(kept, max_out, device), out_keys, torch.zeros_like(out_keys))
        out_coors = torch.stack([out_keys // (oz * oy * ox), out_keys // (oy * ox) % oz, out_keys // ox % oy,
                                 out_keys % ox], 1)
        row = torch.where(ok, rank.index_select(0, okey.reshape(-1).clamp(max=max(g - 1, 0))).view(okey.shape),
                          torch.full_like(okey, max_out))
        row = torch.where(row < max_out, row, torch.full_like(row, max_out))
        src = torch.arange(vmax, device=device)[:, None].expand(vmax, tap.shape[1])
        flat = row * kv + tap
        nbr = torch.full(((max_out + 1) * kv,), vmax, dtype=torch.long, device=device).scatter(
            0, flat.reshape(-1), src.reshape(-1)).view(max_out + 1, kv)[:max_out]
        return ConvRulebook(out_coors, kept, total - kept, nbr)

    def rulebook_inverse(self, nbr, num_rows):
        """(num_rows, K) inverse map of a strided map, as :func:`fsdlite.ops.rulebook_inverse`."""
        vout, kv = nbr.shape
        rows = torch.arange(vout, device=nbr.device).view(-1, 1).expand(vout, kv)
        inv = torch.full((int(num_rows) + 1, kv), vout, dtype=torch.long, device=nbr.device)
        return inv.scatter(0, nbr.long(), rows)[:int(num_rows)]  # the dump row absorbs every missing pair


__all__ = ['GraphRulebookOps']
