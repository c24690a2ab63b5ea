"""rulebook: neighbour maps of sparse 3D convolutions over padded voxel coordinates (export-friendly).

A neighbour map ``nbr`` (Vout, K) lists, for every output row and kernel offset k, the row of the input
voxel read by that offset, or the **dump index** (the number of input rows) when there is none. Offsets
are numbered in ``itertools.product`` order over (z, y, x) -- spconv's weight layout ``(Cout, kz, ky, kx,
Cin)`` -- so a convolution is ``out = sum_k x_pad[nbr[:, k]] @ W_k`` with a zero row appended to ``x``.

Inputs are padded: ``coors`` (Vmax, 4) int64 ``[b, z, y, x]`` whose first ``num_valid`` rows are unique
voxels inside ``spatial_shape``; padding rows are ignored and never referenced. Not differentiable
(integer outputs). Conventions follow spconv 2.x:

* submanifold (``SubMConv3d``, odd kernels): output = input rows; offset k reads ``c + (k - K // 2) * dilation``;
* strided (``SparseConv3d``): output cell ``o`` exists iff an input voxel reads it, ``o * stride - padding +
  k * dilation = c`` for some k, with ``0 <= o < conv_output_shape(...)`` -- the set spconv produces. Rows are
  **sorted by (b, z, y, x)** (spconv's own order is unspecified), padded to ``max_out`` (padding rows 0);
  outputs beyond ``max_out`` are dropped from the end and counted;
* inverse (``SparseInverseConv3d``): the transposed pairs of a strided map; its outputs are the strided
  conv's input rows.

:func:`subm_offset_pairs` and :func:`conv_offset_pairs` build the same rulebooks for unpadded voxels (every row
valid, exact output count) directly as offset-grouped pairs, the input of :func:`fsdlite.ops.sparse_conv` (eager
inference), without a neighbour map in between, as exact :class:`~fsdlite.ops.sparse_conv.KernelMap`.
"""
from typing import NamedTuple

import torch

from .. import _checks
from .._checks import OpValueError
from ..sparse_conv import PAIR_TILE, KernelMap
from .graph import GraphRulebookOps
from .reference import ConvRulebook, grid_keys
from .reference import conv_output_shape as _conv_output_shape


@_checks.register_fake('fsdlite::rulebook_subm')
def _subm_fake(coors, num_valid, spatial_shape, kernel_size, dilation):
    k = kernel_size[0] * kernel_size[1] * kernel_size[2]
    return coors.new_empty((coors.shape[0], k))


@_checks.register_fake('fsdlite::rulebook_conv')
def _conv_fake(coors, num_valid, spatial_shape, kernel_size, stride, padding, dilation, max_out):
    k = kernel_size[0] * kernel_size[1] * kernel_size[2]
    return (coors.new_empty((max_out, 4)), coors.new_empty(()), coors.new_empty(()), coors.new_empty((max_out, k)))


@_checks.register_fake('fsdlite::rulebook_pairs')
def _pairs_fake(nbr, num_in, capacity, tile):
    return nbr.new_empty((3, capacity)), nbr.new_empty(()), nbr.new_empty(())


@_checks.register_fake('fsdlite::rulebook_subm_pairs')
def _subm_pairs_fake(coors, spatial_shape, kernel_size, dilation):
    num_pairs = torch.library.get_ctx().new_dynamic_size()
    return coors.new_empty((2, num_pairs)), coors.new_empty((kernel_size[0] * kernel_size[1] * kernel_size[2] + 1,))


@_checks.register_fake('fsdlite::rulebook_conv_pairs')
def _conv_pairs_fake(coors, spatial_shape, kernel_size, stride, padding, dilation):
    ctx = torch.library.get_ctx()
    num_out, num_pairs = ctx.new_dynamic_size(), ctx.new_dynamic_size()
    k = kernel_size[0] * kernel_size[1] * kernel_size[2]
    return coors.new_empty((num_out, 4)), coors.new_empty((2, num_pairs)), coors.new_empty((k + 1,))


@_checks.register_fake('fsdlite::rulebook_inverse')
def _inverse_fake(nbr, num_rows):
    return nbr.new_empty((num_rows, nbr.shape[1]))


def _coors_and_count(op, coors, num_valid, spatial_shape):
    _checks.tensor(op, 'coors', coors, dtypes=_checks.INDEX_DTYPES, dim=2, size={1: (4, '[b, z, y, x]')})
    if isinstance(num_valid, torch.Tensor):
        _checks.tensor(op, 'num_valid', num_valid, dtypes=_checks.INDEX_DTYPES)
        if num_valid.is_meta or coors.is_meta:  # num_valid may sit on any real device (it is moved to coors')
            _checks.same_device(op, coors=coors, num_valid=num_valid)
        if num_valid.numel() != 1:
            raise OpValueError(f'{op}: num_valid must be an int or a 1-element tensor, got shape '
                               f'{tuple(num_valid.shape)}')
        num_valid = num_valid.reshape(()).to(device=coors.device, dtype=torch.long)
    else:
        num_valid = torch.tensor(_checks.positive_int(op, 'num_valid', num_valid, allow_zero=True), dtype=torch.long,
                                 device=coors.device)
    shape = _checks.int_sequence(op, 'spatial_shape', spatial_shape, 3, minimum=1)
    # the values (num_valid <= coors.shape[0], coordinates inside the grid) are checked by the C++ op, in one pass
    coors = coors.long()
    return coors, num_valid, shape


def conv_output_shape(spatial_shape, kernel_size, stride=1, padding=0, dilation=1):
    """Output grid ``(oz, oy, ox)`` of a strided sparse conv (spconv's ``get_conv_output_size``).

    Arguments are ints or 3-sequences (z, y, x); raises ValueError when the output grid would be empty.
    """
    op = 'conv_output_shape'
    shape = _checks.int_sequence(op, 'spatial_shape', spatial_shape, 3, minimum=1)
    k, s = (_checks.int_sequence(op, n, v, 3, minimum=1) for n, v in (('kernel_size', kernel_size), ('stride', stride)))
    p = _checks.int_sequence(op, 'padding', padding, 3, minimum=0)
    d = _checks.int_sequence(op, 'dilation', dilation, 3, minimum=1)
    out = _conv_output_shape(shape, k, s, p, d)
    if min(out) < 1:
        raise OpValueError(f'{op}: spatial_shape {shape} with kernel_size {k}, stride {s}, padding {p}, dilation {d} '
                           f'gives an empty output grid {out}')
    return out


def rulebook_subm(coors, num_valid, spatial_shape, kernel_size=3, dilation=1):
    """Neighbour map of a submanifold sparse conv (spconv ``SubMConv3d``).

    Args:
        coors (Tensor): (Vmax, 4) int64/int32 ``[b, z, y, x]``; rows ``< num_valid`` unique voxels.
        num_valid (int | Tensor): number of valid rows (0-d integer tensor or int).
        spatial_shape (Sequence[int]): grid ``(nz, ny, nx)``.
        kernel_size (int | Sequence[int]): odd sizes (z, y, x).
        dilation (int | Sequence[int]): >= 1.
    Returns:
        Tensor: (Vmax, K) int64 input rows; ``Vmax`` (dump) for missing neighbours and padding rows.
    """
    op = 'rulebook_subm'
    coors, num_valid, shape = _coors_and_count(op, coors, num_valid, spatial_shape)
    k = _checks.int_sequence(op, 'kernel_size', kernel_size, 3, minimum=1)
    if any(v % 2 == 0 for v in k):
        raise OpValueError(f'{op}: submanifold kernel_size must be odd on every axis (as spconv), got {kernel_size!r}')
    d = _checks.int_sequence(op, 'dilation', dilation, 3, minimum=1)
    return torch.ops.fsdlite.rulebook_subm(coors, num_valid, shape, k, d)


def rulebook_conv(coors, num_valid, spatial_shape, kernel_size, stride=1, padding=0, dilation=1, *, max_out):
    """Output voxels and neighbour map of a strided (regular) sparse conv (spconv ``SparseConv3d``).

    Args:
        coors, num_valid, spatial_shape: padded input voxels (as :func:`rulebook_subm`).
        kernel_size, stride, padding, dilation (int | Sequence[int]): conv geometry (z, y, x).
        max_out (int): output bound Vout_max (rows of the padded result).
    Returns:
        ConvRulebook: ``out_coors`` (max_out, 4) sorted by ``(b, z, y, x)``, ``num_valid_out``,
        ``num_dropped`` (outputs beyond ``max_out``, dropped from the end) and ``nbr`` (max_out, K) rows of
        ``coors`` (``Vmax`` = dump). The output grid is :func:`conv_output_shape`.
    """
    op = 'rulebook_conv'
    coors, num_valid, shape = _coors_and_count(op, coors, num_valid, spatial_shape)
    k = _checks.int_sequence(op, 'kernel_size', kernel_size, 3, minimum=1)
    s = _checks.int_sequence(op, 'stride', stride, 3, minimum=1)
    p = _checks.int_sequence(op, 'padding', padding, 3, minimum=0)
    d = _checks.int_sequence(op, 'dilation', dilation, 3, minimum=1)
    conv_output_shape(shape, k, s, p, d)
    max_out = _checks.positive_int(op, 'max_out', max_out, allow_zero=True)
    return ConvRulebook(*torch.ops.fsdlite.rulebook_conv(coors, num_valid, shape, k, s, p, d, max_out))


def rulebook_inverse(nbr, num_rows):
    """Neighbour map of the inverse conv (spconv ``SparseInverseConv3d``) of a strided conv.

    Args:
        nbr (Tensor): (Vout_max, K) int64 map returned by :func:`rulebook_conv` (values in ``[0, num_rows]``).
        num_rows (int): Vmax, rows of the strided conv's input (its dump index).
    Returns:
        Tensor: (num_rows, K) int64 rows of the strided conv's *output* (the inverse conv's input);
        ``Vout_max`` (dump) where no pair exists.
    """
    op = 'rulebook_inverse'
    _checks.tensor(op, 'nbr', nbr, dtypes=_checks.INDEX_DTYPES, dim=2)
    num_rows = _checks.positive_int(op, 'num_rows', num_rows, allow_zero=True)
    return torch.ops.fsdlite.rulebook_inverse(nbr.long(), num_rows)


class RulebookPairs(NamedTuple):
    """A fixed-size pair list and its counts: the result of :func:`rulebook_pairs` (int64, on the device of ``nbr``)
    and of the model-side builders of the same list (``layers.pair_conv``); read as a tiled ``KernelMap``."""
    pairs: torch.Tensor       #: (3, capacity) input row (num_in = dump), output row (Vout = dump), tile offset
    num_pairs: torch.Tensor   #: () real pairs of the map
    num_placed: torch.Tensor  #: () pairs in the list (the rest did not fit: dropped)

    @property
    def num_dropped(self):
        """() int64 pairs that did not fit into the list (0 unless the capacity was too small)."""
        return self.num_pairs - self.num_placed


def rulebook_pairs(nbr, num_in, capacity, tile=PAIR_TILE):
    """The real pairs of a neighbour map as a fixed-size pair list grouped by kernel offset.

    Pairs keep the map's order (offset-major, then output row); each offset's pairs start a new tile of
    ``tile`` rows, so every tile holds one offset (one weight matrix: a batched GEMM per conv). Unused rows point
    at the dumps; pairs whose position reaches ``capacity`` (the highest offsets first) are dropped and counted.

    Args:
        nbr (Tensor): (Vout, K) int64 input rows, ``num_in`` = dump (a map of :func:`rulebook_subm`,
            :func:`rulebook_conv` or :func:`rulebook_inverse`).
        num_in (int): Vin, the input rows (dump index of ``nbr``).
        capacity (int): rows of the list, a multiple of ``tile``.
        tile (int): rows per tile (>= 1).
    Returns:
        RulebookPairs: ``pairs`` (3, capacity): row 0 input rows (``num_in`` in unused rows), row 1 output rows
        (``Vout`` in unused rows), row 2 the kernel offset of each row's tile (0 in unused tiles); ``num_pairs``
        and ``num_placed``.
    """
    op = 'rulebook_pairs'
    _checks.tensor(op, 'nbr', nbr, dtypes=_checks.INDEX_DTYPES, dim=2)
    num_in = _checks.positive_int(op, 'num_in', num_in, allow_zero=True)
    tile = _checks.positive_int(op, 'tile', tile)
    capacity = _checks.positive_int(op, 'capacity', capacity, allow_zero=True)
    if capacity % tile:
        raise OpValueError(f'{op}: capacity must be a multiple of tile ({tile}), got {capacity}')
    if not 1 <= nbr.shape[1] <= 4096:
        raise OpValueError(f'{op}: nbr must have 1 to 4096 kernel offsets (columns), got {nbr.shape[1]}')
    return RulebookPairs(*torch.ops.fsdlite.rulebook_pairs(nbr.long(), num_in, capacity, tile))


def _unpadded_coors(op, coors, spatial_shape):
    """int64 coordinates and the grid; value ranges and duplicates are checked by the C++ op (one pass)."""
    _checks.tensor(op, 'coors', coors, dtypes=_checks.INDEX_DTYPES, dim=2, size={1: (4, '[b, z, y, x]')})
    return coors.long(), _checks.int_sequence(op, 'spatial_shape', spatial_shape, 3, minimum=1)


def _geometry_args(op, kernel_size, stride, padding, dilation):
    return (_checks.int_sequence(op, 'kernel_size', kernel_size, 3, minimum=1),
            _checks.int_sequence(op, 'stride', stride, 3, minimum=1),
            _checks.int_sequence(op, 'padding', padding, 3, minimum=0),
            _checks.int_sequence(op, 'dilation', dilation, 3, minimum=1))


def voxel_keys(coors, spatial_shape):
    """(V,) int64 key ``((b * nz + z) * ny + y) * nx + x`` of (V, 4) ``[b, z, y, x]`` voxels: the order the rulebook
    ops sort voxels in, and in which :func:`subm_offset_pairs` / :func:`conv_offset_pairs` take their fast paths."""
    return grid_keys(coors.long(), spatial_shape)


def subm_offset_pairs(coors, spatial_shape, kernel_size=3, dilation=1):
    """Pairs of a submanifold sparse conv (spconv ``SubMConv3d``) grouped by kernel offset, from unpadded voxels.

    Args:
        coors (Tensor): (V, 4) int64/int32 ``[b, z, y, x]``, unique rows (all valid).
        spatial_shape (Sequence[int]): grid ``(nz, ny, nx)``.
        kernel_size (int | Sequence[int]): odd sizes (z, y, x).
        dilation (int | Sequence[int]): >= 1.
    Returns:
        KernelMap: exact, ``pairs`` (2, P) int64 ``[input row; output row]`` and ``offset_starts`` (K + 1,), V input
        and output rows: the entries of :func:`rulebook_subm`'s map in
        offset-major, output-row order. When ``coors`` are sorted by ``(b, z, y, x)`` the input rows of an offset
        ascend too (then only half of the offsets are looked up: offset K-1-k is offset k swapped).
    """
    op = 'subm_offset_pairs'
    coors, shape = _unpadded_coors(op, coors, spatial_shape)
    k, _, _, d = _geometry_args(op, kernel_size, 1, 0, dilation)
    if any(v % 2 == 0 for v in k):
        raise OpValueError(f'{op}: submanifold kernel_size must be odd on every axis (as spconv), got {kernel_size!r}')
    return KernelMap.exact(*torch.ops.fsdlite.rulebook_subm_pairs(coors, shape, k, d), coors.shape[0], coors.shape[0])


def conv_offset_pairs(coors, spatial_shape, kernel_size, stride=1, padding=0, dilation=1):
    """Output voxels and offset-grouped pairs of a strided sparse conv (spconv ``SparseConv3d``), unpadded.

    Args:
        coors, spatial_shape: unpadded input voxels (as :func:`subm_offset_pairs`).
        kernel_size, stride, padding, dilation (int | Sequence[int]): conv geometry (z, y, x).
    Returns:
        tuple: ``out_coors`` (M, 4) int64, every output voxel sorted by ``(b, z, y, x)`` (:func:`rulebook_conv`'s
        outputs, none dropped), and the exact KernelMap (V input, M output rows) with output rows ascending within an
        offset (input rows too when ``coors`` are sorted: swapped, they are the inverse conv's pairs).
    """
    op = 'conv_offset_pairs'
    coors, shape = _unpadded_coors(op, coors, spatial_shape)
    k, s, p, d = _geometry_args(op, kernel_size, stride, padding, dilation)
    conv_output_shape(shape, k, s, p, d)
    out_coors, pairs, starts = torch.ops.fsdlite.rulebook_conv_pairs(coors, shape, k, s, p, d)
    return out_coors, KernelMap.exact(pairs, starts, coors.shape[0], out_coors.shape[0])


__all__ = ['ConvRulebook', 'GraphRulebookOps', 'conv_output_shape', 'rulebook_subm', 'rulebook_conv',
           'rulebook_inverse', 'RulebookPairs', 'rulebook_pairs', 'voxel_keys', 'subm_offset_pairs',
           'conv_offset_pairs']
