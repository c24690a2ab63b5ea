"""sparse_conv: sparse convolution as a fused gather-GEMM-scatter over pairs grouped by kernel offset.

A convolution rulebook lists, for every kernel offset ``k``, the pairs (input row ``i``, output row ``o``) it
connects; the convolution is ``out[o] = sum over pairs (i, o) of offset k of features[i] @ weight[k]``. Here the
pairs are one (2, P) int64 tensor ``[input rows; output rows]`` grouped by offset (``offset_starts`` (K + 1,):
offset k owns columns ``[offset_starts[k], offset_starts[k + 1])``), with the output rows of one offset strictly
increasing. :class:`KernelMap` is the one type of such pairs (exact, and the padded layouts of exported graphs):
:func:`pairs_by_offset` builds an exact one from a padded neighbour map (the ``fsdlite.ops`` rulebook ops' output),
:meth:`KernelMap.transposed` gives the map of the transposed convolution (an inverse conv, or the gradient w.r.t.
the features).

:func:`sparse_conv` runs the C++/CUDA kernel: no gathered (P, Cin) buffer and no Python loop over offsets (the
per-offset overhead that dominates spconv's CPU path for narrow layers); on the CPU float32 with Cout a multiple
of 8 uses AVX2/FMA when available. Gradients flow to ``features``, ``weight`` and ``bias``: the feature gradient is
the transposed convolution, the weight gradient the :func:`sparse_conv_weight_grad` kernel (one task per offset, no
Python loop); both are differentiable again.
"""
from typing import NamedTuple, Optional

import torch

from .. import _checks
from .._checks import OpValueError
from ..build import register_autograd


_OP = 'sparse_conv'


@_checks.register_fake('fsdlite::sparse_conv')
def _sparse_conv_fake(features, weight, pairs, offset_starts, num_out):
    return features.new_empty((num_out, weight.shape[2]))


@_checks.register_fake('fsdlite::sparse_conv_weight_grad')
def _sparse_conv_weight_grad_fake(features, grad_out, pairs, offset_starts):
    return features.new_empty((offset_starts.shape[0] - 1, features.shape[1], grad_out.shape[1]))


@_checks.register_fake('fsdlite::sparse_conv_pairs')
def _sparse_conv_pairs_fake(nbr, num_in):
    num_pairs = torch.library.get_ctx().new_dynamic_size()
    return nbr.new_empty((2, num_pairs)), nbr.new_empty((nbr.shape[1] + 1,))


def _offset_of_pairs(offset_starts):
    counts = offset_starts[1:] - offset_starts[:-1]
    return torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)


def _inputs_ascending(pairs, offset_starts):
    """True when the input rows strictly ascend within every offset (then the swapped pairs are already grouped and
    ordered as :func:`sparse_conv` needs: the case of rulebooks built from voxels sorted by (b, z, y, x))."""
    num = pairs.shape[1]
    if num < 2:
        return True
    offset_first = torch.zeros(num, dtype=torch.bool, device=pairs.device)
    offset_first[offset_starts[:-1].clamp(max=num - 1)] = True
    return bool(((pairs[0, 1:] > pairs[0, :-1]) | offset_first[1:]).all())


def _transposed(pairs, offset_starts, num_in, op):
    if _inputs_ascending(pairs, offset_starts):
        return pairs.flip(0)
    key = _offset_of_pairs(offset_starts) * max(int(num_in), 1) + pairs[0]
    key, order = torch.sort(key)
    repeated = torch.nonzero(key[1:] == key[:-1])
    if repeated.numel():
        j = int(order[int(repeated[0]) + 1])
        raise OpValueError(f'{op}: input row {int(pairs[0, j])} appears twice among the pairs of one offset (pairs[:, '
                           f'{j}]); the transposed convolution needs each input row at most once per offset, as in '
                           'every convolution rulebook')
    return pairs.flip(0).index_select(1, order)


def _transposed_conv(rows, matrices, pairs, offset_starts, num_in, op):
    """``sum over pairs (i, o) of offset k: rows[o] @ matrices[k]^T`` into ``num_in`` rows: the transposed
    convolution of ``rows`` (Vout, Cout) with (K, Cin, Cout) ``matrices`` -> (num_in, Cin)."""
    transposed = _transposed(pairs, offset_starts, num_in, op)
    return torch.ops.fsdlite.sparse_conv(rows, matrices.transpose(1, 2), transposed, offset_starts, num_in)


def _save_tensor_inputs(ctx, inputs, output):
    """setup_context of both ops: their four tensor inputs (``num_out`` of sparse_conv is not needed)."""
    ctx.save_for_backward(*inputs[:4])


def _backward(ctx, grad_out):
    features, weight, pairs, offset_starts = ctx.saved_tensors
    need_features, need_weight = ctx.needs_input_grad[:2]
    grad_features = grad_weight = None
    if need_features:
        grad_features = _transposed_conv(grad_out, weight, pairs, offset_starts, features.shape[0],
                                         'sparse_conv backward')
    if need_weight:
        grad_weight = torch.ops.fsdlite.sparse_conv_weight_grad(features, grad_out, pairs, offset_starts)
    return grad_features, grad_weight, None, None, None


def _weight_grad_backward(ctx, grad_grad_weight):
    """Gradients of ``grad_weight[k] = sum features[i]^T grad_out[o]``: two sparse convolutions with it as the
    weight (the pairs transposed for ``features``)."""
    features, grad_out, pairs, offset_starts = ctx.saved_tensors
    need_features, need_grad_out = ctx.needs_input_grad[:2]
    d_features = d_grad_out = None
    if need_features:
        d_features = _transposed_conv(grad_out, grad_grad_weight, pairs, offset_starts, features.shape[0],
                                      'sparse_conv_weight_grad backward')
    if need_grad_out:
        d_grad_out = torch.ops.fsdlite.sparse_conv(features, grad_grad_weight, pairs, offset_starts,
                                                   grad_out.shape[0])
    return d_features, d_grad_out, None, None


register_autograd('fsdlite::sparse_conv', _backward, setup_context=_save_tensor_inputs)
register_autograd('fsdlite::sparse_conv_weight_grad', _weight_grad_backward,
                                setup_context=_save_tensor_inputs)


def _check_pairs(op, pairs, offset_starts):
    _checks.tensor(op, 'pairs', pairs, dtype=torch.long, dim=2, size={0: (2, '[input row; output row]')})
    _checks.tensor(op, 'offset_starts', offset_starts, dtype=torch.long, dim=1)
    if offset_starts.numel() < 1:
        raise OpValueError(f'{op}: offset_starts must have K + 1 >= 1 entries, got shape {tuple(offset_starts.shape)}')


PAIR_TILE = 128  #: rows per tile of a tiled map (one kernel offset each); larger tiles copy fewer weights


class KernelMap(NamedTuple):
    """The (input row, output row) pairs of one sparse convolution grouped by kernel offset (offset ``k`` in
    ``itertools.product`` order of the kernel, spconv's weight order). One type, three layouts:

    * **exact** -- ``pairs`` (2, P) and ``offset_starts`` (K + 1,) marking where each offset's pairs start; no
      padding, output rows strictly ascending within an offset (:func:`subm_offset_pairs`,
      :func:`conv_offset_pairs`, :func:`pairs_by_offset`, :meth:`transposed`): the input of :func:`sparse_conv`.
      It may also carry spconv's form of its pairs (``native``, :meth:`on_spconv`).
    * **tiled** -- padded to a capacity of ``P`` pairs in tiles of ``tile`` rows, one kernel offset per tile
      (``tile_offsets``); unused rows point at the dump rows (input ``num_in``, output ``num_out``). A submanifold
      conv's centre offset pairs every row with itself: its pairs may be left out of the list and named by
      ``identity_offset`` (then ``num_in == num_out``), and the conv multiplies every row by that offset's matrix.
    * **dense** -- padded to one slot per output row and offset: ``nbr`` (Vout, K) holds the input row of each (the
      output row is implicit), ``num_in`` where there is none (spconv's rulebooks as padded index tensors).

    Build with :meth:`exact`, :meth:`tiled` or :meth:`dense`.
    """
    pairs: Optional[torch.Tensor]          #: exact, tiled: (2, P) int64 [input row; output row], grouped by offset
    offset_starts: Optional[torch.Tensor]  #: exact: (K + 1,) int64 first pair of each offset (last = P)
    tile_offsets: Optional[torch.Tensor]   #: tiled: (P // tile,) int64 kernel offset of each tile
    nbr: Optional[torch.Tensor]            #: dense: (Vout, K) int64 input row per output row and offset
    num_in: int                            #: input rows Vin (the input dump row of a padded map)
    num_out: int                           #: output rows Vout (the output dump row of a tiled map)
    native: Optional[tuple] = None         #: exact, run on spconv: (2, K, max pairs) int32 pairs, (K,) int32 counts
    identity_offset: Optional[int] = None  #: tiled: the offset whose pairs are (i, i) for every row, not listed

    @classmethod
    def exact(cls, pairs, offset_starts, num_in, num_out):
        """An exact map of (2, P) int64 ``pairs`` grouped by offset and their (K + 1,) ``offset_starts``."""
        return cls(pairs, offset_starts, None, None, int(num_in), int(num_out))

    @classmethod
    def tiled(cls, pair_list, num_in, num_out, tile=PAIR_TILE, identity_offset=None):
        """A tiled map from a (3, P) int64 pair list ``[input row; output row; kernel offset]`` (P a multiple of
        ``tile``, the offset constant within a tile: :func:`rulebook_pairs`); ``identity_offset``: the offset whose
        (i, i) pairs the list leaves out (a submanifold conv's centre; ``num_in`` must equal ``num_out``). Works
        inside an exported graph (slices only)."""
        if pair_list.dim() != 2 or pair_list.shape[0] != 3 or pair_list.shape[1] % tile:
            raise ValueError(f'KernelMap.tiled: the pair list must have shape (3, P) with P a multiple of {tile}, '
                             f'got {tuple(pair_list.shape)}')
        if identity_offset is not None and int(num_in) != int(num_out):
            raise ValueError(f'KernelMap.tiled: an identity_offset ({identity_offset}) pairs every row with itself, '
                             f'so num_in must equal num_out, got {num_in} and {num_out}')
        return cls(pair_list[:2], None, pair_list[2].view(-1, tile)[:, 0], None, int(num_in), int(num_out),
                   identity_offset=None if identity_offset is None else int(identity_offset))

    @classmethod
    def dense(cls, nbr, num_in):
        """A dense map from a (Vout, K) int64 neighbour map whose missing entries are ``num_in``
        (:func:`rulebook_subm`, :func:`rulebook_conv`, :func:`rulebook_inverse`)."""
        return cls(None, None, None, nbr, int(num_in), int(nbr.shape[0]))

    @property
    def layout(self):
        """``'exact'``, ``'tiled'`` or ``'dense'``."""
        return 'dense' if self.nbr is not None else ('tiled' if self.tile_offsets is not None else 'exact')

    @property
    def backend(self):
        """What runs the map: ``'fsdlite'`` (exact: :func:`sparse_conv`), ``'spconv'`` (exact with :attr:`native`)
        or ``'export'`` (tiled, dense: standard ops)."""
        if self.layout != 'exact':
            return 'export'
        return 'fsdlite' if self.native is None else 'spconv'

    def transposed(self):
        """The map of the transposed convolution (input and output rows swapped, the same offsets) of an exact
        map, its output rows ascending within an offset as :func:`sparse_conv` needs (a swap when the input rows
        ascend -- rulebooks of voxels sorted by (b, z, y, x) -- else re-sorted); a tiled map's rows swapped.

        Raises:
            ValueError: a dense map (use :func:`rulebook_inverse`), or ``offset_starts`` not ending at P.
            OpValueError: an input row out of ``[0, num_in)``, or twice among the pairs of one offset.
        """
        if self.nbr is not None:
            raise ValueError('KernelMap.transposed: a dense map is transposed by rulebook_inverse')
        native = None if self.native is None else (self.native[0].flip(0), self.native[1])
        if self.tile_offsets is not None:
            return self._replace(pairs=self.pairs.flip(0), num_in=self.num_out, num_out=self.num_in)
        op = 'KernelMap.transposed'
        _check_pairs(op, self.pairs, self.offset_starts)
        if self.pairs.shape[1] != int(self.offset_starts[-1]):
            raise OpValueError(f'{op}: offset_starts ends at {int(self.offset_starts[-1])}, expected pairs.shape[1] = '
                               f'{self.pairs.shape[1]}')
        _checks.index_range(op, 'pairs[0]', self.pairs[0], 0, self.num_in)
        pairs = _transposed(self.pairs, self.offset_starts, self.num_in, op)
        return self._replace(pairs=pairs, num_in=self.num_out, num_out=self.num_in, native=native)

    def on_spconv(self):
        """This exact map with spconv's form of its pairs added (``indice_pairs`` (2, K, max pairs) int32, -1
        past each offset's count, and ``indice_pair_num`` (K,) int32): it then runs on spconv's kernels."""
        if self.layout != 'exact':
            raise ValueError(f'KernelMap.on_spconv: only an exact map runs on spconv, this one is {self.layout}')
        starts = self.offset_starts
        counts = starts[1:] - starts[:-1]
        kv, num = counts.numel(), self.pairs.shape[1]
        offset = torch.repeat_interleave(torch.arange(kv, device=starts.device), counts, output_size=num)
        column = torch.arange(num, device=starts.device) - starts.index_select(0, offset)
        width = max(int(counts.max()) if kv else 0, 1)
        indice_pairs = torch.full((2, kv, width), -1, dtype=torch.int32, device=starts.device)
        indice_pairs[:, offset, column] = self.pairs.int()
        return self._replace(native=(indice_pairs, counts.int()))


def sparse_conv(features, weight, pairs, offset_starts, num_out, bias=None):
    """Sparse convolution over offset-grouped pairs (fused gather-GEMM-scatter, differentiable).

    Args:
        features (Tensor): (Vin, Cin) float32/float64 input rows.
        weight (Tensor): (K, Cin, Cout) one matrix per kernel offset (spconv's ``(Cout, kz, ky, kx, Cin)`` weight
            is ``weight.reshape(Cout, K, Cin).permute(1, 2, 0)``).
        pairs (Tensor): (2, P) int64 input rows in ``[0, Vin)`` and output rows in ``[0, num_out)``, grouped by
            offset, output rows strictly increasing within an offset (:func:`pairs_by_offset`).
        offset_starts (Tensor): (K + 1,) int64, 0 = starts[0] <= ... <= starts[K] = P.
        num_out (int): output rows (rows without a pair get ``bias`` or 0).
        bias (Tensor, optional): (Cout,).
    Returns:
        Tensor: (num_out, Cout).
    """
    _checks.tensor(_OP, 'features', features, dtypes=(torch.float32, torch.float64), dim=2)
    _checks.tensor(_OP, 'weight', weight, dtype=features.dtype, dim=3,
                   size={1: (features.shape[1], 'features.shape[1] (Cin)')})
    _check_pairs(_OP, pairs, offset_starts)
    _checks.tensor(_OP, 'offset_starts', offset_starts,
                   size={0: (weight.shape[0] + 1, 'weight.shape[0] + 1 (K + 1)')})
    num_out = _checks.positive_int(_OP, 'num_out', num_out, allow_zero=True)
    _checks.output_memory(_OP, 'num_out', num_out, weight.shape[2], 'weight.shape[2], Cout', features.element_size(),
                          features.device)
    if bias is not None:
        _checks.tensor(_OP, 'bias', bias, dtype=features.dtype, dim=1, size={0: (weight.shape[2], 'Cout')})
    _checks.same_device(_OP, features=features, weight=weight, pairs=pairs, offset_starts=offset_starts, bias=bias)
    out = torch.ops.fsdlite.sparse_conv(features, weight, pairs, offset_starts, num_out)
    if bias is None:
        return out
    return out + bias if out.requires_grad else out.add_(bias)  # (the op's backward does not read its output)


def sparse_conv_weight_grad(features, grad_out, pairs, offset_starts):
    """Gradient of :func:`sparse_conv` w.r.t. its weight (what its backward runs; differentiable).

    Args:
        features (Tensor): (Vin, Cin) float32/float64 input rows of the convolution.
        grad_out (Tensor): (Vout, Cout) gradient of its output.
        pairs (Tensor): (2, P) int64 input rows in ``[0, Vin)``, output rows in ``[0, Vout)``, grouped by offset
            (any order within an offset; the backward w.r.t. ``grad_out`` needs :func:`sparse_conv`'s order).
        offset_starts (Tensor): (K + 1,) int64, offset k owns pairs ``[starts[k], starts[k + 1])``.
    Returns:
        Tensor: (K, Cin, Cout), ``[k] = sum over pairs (i, o) of offset k of outer(features[i], grad_out[o])``.
    """
    op = 'sparse_conv_weight_grad'
    _checks.tensor(op, 'features', features, dtypes=(torch.float32, torch.float64), dim=2)
    _checks.tensor(op, 'grad_out', grad_out, dtype=features.dtype, dim=2)
    _check_pairs(op, pairs, offset_starts)
    _checks.same_device(op, features=features, grad_out=grad_out, pairs=pairs, offset_starts=offset_starts)
    return torch.ops.fsdlite.sparse_conv_weight_grad(features, grad_out, pairs, offset_starts)


def pairs_by_offset(nbr, num_in):
    """Offset-grouped pairs of a neighbour map (output rows ascending within an offset).

    Args:
        nbr (Tensor): (Vout, K) int64/int32 input row of every output row and offset; values ``>= num_in`` (the
            rulebook ops' dump index among them) mean "no neighbour".
        num_in (int): input rows.
    Returns:
        KernelMap: exact, ``pairs`` (2, P) int64 and ``offset_starts`` (K + 1,) int64, ``num_in`` input and Vout
        output rows.
    """
    op = 'pairs_by_offset'
    _checks.tensor(op, 'nbr', nbr, dtypes=_checks.INDEX_DTYPES, dim=2)
    num_in = _checks.positive_int(op, 'num_in', num_in, allow_zero=True)
    return KernelMap.exact(*torch.ops.fsdlite.sparse_conv_pairs(nbr.long(), num_in), num_in, nbr.shape[0])


__all__ = ['PAIR_TILE', 'KernelMap', 'sparse_conv', 'sparse_conv_weight_grad', 'pairs_by_offset']
