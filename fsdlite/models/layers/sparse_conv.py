"""The sparse-convolution functional and the conv module family, on the one pair format ``fsdlite.ops.KernelMap``.

A kernel map (:class:`fsdlite.ops.sparse_conv.KernelMap`) lists the (input row, output row) pairs of one sparse
convolution grouped by kernel offset, in one of three layouts, each with its backend in :func:`sparse_conv`:

* **exact** -- no padding (``fsdlite.ops.subm_offset_pairs`` / ``conv_offset_pairs`` / ``pairs_by_offset``): run
  by fsdlite's fused kernels (``fsdlite.ops.sparse_conv``, CPU and CUDA, forward and backward), or by spconv's
  gather-GEMM-scatter kernels when the map carries spconv's form of its pairs (``KernelMap.on_spconv``; the
  backend a map is built for: :func:`resolve_backend`);
* **tiled** -- padded to a capacity in tiles of one kernel offset each: run as a gather-GEMM-scatter of standard
  ops (Gather / MatMul / ScatterND(add), static shapes), in chunks of tiles; a submanifold conv's centre offset
  (every row paired with itself) as one plain MatMul over all rows when the map names it (``identity_offset``);
* **dense** -- one slot per output row and offset (spconv's rulebooks as padded index tensors): run as a
  gather-GEMM of standard ops.

Weights are (K, Cin, Cout) matrices (:func:`~fsdlite.models.layers.rulebook_conv.kernel_matrices` of spconv's
``(Cout, kz, ky, kx, Cin)`` weight). :class:`RulebookSparseConv3d` holds spconv's parameters unchanged and runs on a
:class:`~fsdlite.models.layers.sparse_tensor.SparseTensor` (which builds and caches its kernel maps) or on a given
kernel map; :func:`conv_module_forward` runs an spconv layer the same way.
"""
import math

import torch
from torch import nn

import fsdlite.ops as fsdlite_ops
from fsdlite.ops import PAIR_TILE, KernelMap
from fsdlite.structures.padded import with_dump_row
from fsdlite.utils import compat

from .rulebook_conv import MAX_VOXELS_BUFFER, conv_geometry, kernel_matrices
from .static_ops import check_index

CHUNK_BYTES = 2 ** 20  #: gathered input rows a tiled conv handles per chunk (:func:`chunk_tiles`)
DENSE_MODES = ('auto', 'matmul', 'loop')
BACKENDS = ('auto', 'fsdlite', 'spconv')  #: what runs exact maps (see :func:`resolve_backend`)


def resolve_backend(backend, device):
    """The backend exact maps are built for on ``device``: ``backend`` (one of :data:`BACKENDS`) with ``'auto'``
    decided -- ``'fsdlite'`` on the CPU (training and inference), on CUDA ``'spconv'`` when spconv imports and runs
    there, else ``'fsdlite'`` (its CUDA kernels).

    Raises:
        ValueError: ``backend`` is not one of :data:`BACKENDS`.
        RuntimeError: ``'spconv'`` but spconv does not import (the error says why and what runs instead).
    """
    if backend not in BACKENDS:
        raise ValueError(f'sparse-conv backend must be one of {BACKENDS}, got {backend!r}')
    if backend == 'spconv' and not compat.spconv_available():
        raise RuntimeError(f"the sparse-conv backend 'spconv' cannot run: {compat.spconv_unavailable_reason()}; use "
                           "'auto' or 'fsdlite' (fsdlite's own kernels, CPU and CUDA; same weights)")
    if backend != 'auto':
        return backend
    if torch.device(device).type == 'cuda' and compat.spconv_runs_on(device):
        return 'spconv'
    return 'fsdlite'


def sparse_conv(x, kernel_map, weight, bias=None, mode='auto'):
    """Sparse convolution ``out[o] = sum over pairs (i, o) of offset k of x[i] @ weight[k] (+ bias)``.

    Backend by the map (:attr:`KernelMap.backend`): exact -> ``fsdlite.ops.sparse_conv`` (fused, CPU/CUDA,
    differentiable), or spconv's native kernels when the map carries spconv's pairs (:meth:`KernelMap.on_spconv`);
    tiled -> gather-GEMM-scatter, dense -> gather-GEMM, both in standard ops (exportable, autograd through them).

    Args:
        x (Tensor): (Vin, Cin) input rows (padding rows allowed: a padded map never reads them).
        kernel_map (KernelMap): the convolution's pairs.
        weight (Tensor): (K, Cin, Cout) one matrix per kernel offset.
        bias (Tensor, optional): (Cout,).
        mode (str): dense maps only: 'matmul' (one (Vout, K*Cin) @ (K*Cin, Cout) product), 'loop' (K accumulated
            products, less memory) or 'auto' (matmul when the gathered (Vout, K, Cin) buffer is <= 64 MiB).
    Returns:
        Tensor: (num_out, Cout); rows without pairs hold the bias (or 0), plus their own row's product when a
        tiled map has an ``identity_offset``.
    """
    if kernel_map.native is not None:
        return _spconv_conv(x, kernel_map, weight, bias)
    if kernel_map.layout == 'exact':
        return fsdlite_ops.sparse_conv(x, weight, kernel_map.pairs, kernel_map.offset_starts, kernel_map.num_out,
                                       bias=bias)
    cin = weight.shape[1]
    if x.dim() != 2 or x.shape[1] != cin:
        raise ValueError(f'sparse_conv: x must have shape (Vin, {cin}), got {tuple(x.shape)}')
    if kernel_map.layout == 'dense':
        return _dense_conv(x, kernel_map.nbr, weight, bias, mode)
    return _tiled_conv(x, kernel_map, weight, bias)


def _spconv_conv(x, kernel_map, weight, bias):
    """spconv's native gather-GEMM-scatter (its autograd function) on the map's pairs; spconv's weight layout
    (Cout, K, Cin) is the matrices' transpose."""
    kv, cin, _ = weight.shape
    if x.dim() != 2 or x.shape[1] != cin:
        raise ValueError(f'sparse_conv: x must have shape (Vin, {cin}), got {tuple(x.shape)}')
    indice_pairs, counts = kernel_map.native
    if indice_pairs.shape[:2] != (2, kv):
        raise ValueError(f'sparse_conv: kernel_map.native pairs must have shape (2, {kv}, P) for {kv} kernel '
                         f'offsets, got {tuple(indice_pairs.shape)}')
    spconv = compat.import_spconv()
    out = spconv.functional.indice_conv(x.contiguous(), weight.permute(2, 0, 1).contiguous(), indice_pairs, counts,
                                        kernel_map.num_out, spconv.ConvAlgo.Native)
    return out if bias is None else out + bias


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
    # chunk boundaries by one split per index tensor (not a slice per chunk: an exported graph with thousands of
    # Slice nodes makes the ONNX optimizer's Slice-pair rule quadratic in their number)
    tiles = [min(per_chunk, num_tiles - first) for first in range(0, num_tiles, per_chunk)]
    rows = [count * tile for count in tiles]
    chunks = zip(tiles, pairs[0].split(rows), pairs[1].split(rows), kernel_map.tile_offsets.split(tiles))
    padded = with_dump_row(x)
    out = _output_rows(x, num_out + 1, cout, bias) if kernel_map.identity_offset is None else \
        _identity_rows(padded, kernel_map, weight, bias)
    for count, inputs, outputs, offsets in chunks:
        gathered = padded.index_select(0, inputs).view(count, tile, cin)
        out = out.index_add(0, outputs, torch.bmm(gathered, weight.index_select(0, offsets)).view(-1, cout))
    return out[:num_out]


def _identity_rows(padded, kernel_map, weight, bias):
    """(num_out + 1, Cout) start of a tiled conv whose list leaves out the (i, i) pairs of ``identity_offset``
    (a submanifold conv's centre): every row times that offset's matrix, as one plain product (no gather, no
    scatter; the dump row's result is discarded with it)."""
    offset = kernel_map.identity_offset
    if not 0 <= offset < weight.shape[0] or padded.shape[0] != kernel_map.num_out + 1:
        raise ValueError(f'sparse_conv: a tiled map with identity_offset {offset} needs an offset in [0, '
                         f'{weight.shape[0]}) and x with num_out = {kernel_map.num_out} rows, got '
                         f'{padded.shape[0] - 1}')
    return padded @ weight[offset] if bias is None else torch.addmm(bias, padded, weight[offset])


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
    if int(max_pairs) < 0 or int(kernel_volume) < 1:
        raise ValueError(f'pair_capacity: max_pairs must be >= 0 and kernel_volume >= 1, got {max_pairs}, '
                         f'{kernel_volume}')
    rows = int(max_pairs) + int(kernel_volume) * (tile - 1)
    return -(-rows // tile) * tile


class RulebookSparseConv3d(nn.Module):
    """Sparse 3D conv run on a :class:`KernelMap`, parameter-compatible with spconv 2.x.

    ``weight`` (Cout, kz, ky, kx, Cin) and ``bias`` (Cout,) are spconv's, so a state_dict of an spconv
    ``SubMConv3d`` (``subm=True``), ``SparseConv3d`` or ``SparseInverseConv3d`` (``inverse=True``) with the
    same arguments loads with ``strict=True`` (including ``max_num_voxels_during_training`` when
    ``record_voxel_count=True``, updated by :func:`~fsdlite.models.layers.rulebook_conv.build_rulebook` and by a
    forward on a SparseTensor).

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

    Forward: ``SparseTensor -> SparseTensor`` (the map built and cached by the tensor), or
    ``(feats (Vin, Cin), kernel_map) -> (kernel_map.num_out, Cout)``.
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
        self._geometry = conv_geometry(self)

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

    @property
    def geometry(self):
        """The layer's :class:`~fsdlite.models.layers.rulebook_conv.ConvGeometry` (kind, kernel, ``indice_key``),
        read once at construction."""
        return self._geometry

    def matrices(self, weight=None):
        """``weight`` (default: the layer's; spconv's layout) as the (K, Cin, Cout) matrices :func:`sparse_conv`
        takes."""
        return kernel_matrices(self.weight if weight is None else weight, self.geometry.one_by_one)

    def forward(self, x, kernel_map=None, mode='auto'):
        """Run the conv on its weights (:meth:`run`).

        Args:
            x (SparseTensor | Tensor): a :class:`~fsdlite.models.layers.sparse_tensor.SparseTensor` (its kernel map
                for this layer is built or found in its cache), or (Vin, Cin) features with ``kernel_map``.
            kernel_map (KernelMap, optional): the map of a plain-tensor input.
            mode (str): dense maps: see :func:`sparse_conv`.
        Returns:
            SparseTensor | Tensor: the output tensor on the conv's output voxels, or (num_out, Cout) features.
        """
        return self.run(x, self.matrices(), self.bias, kernel_map, mode)

    def run(self, x, matrices, bias, kernel_map=None, mode='auto'):
        """:meth:`forward` with given (K, Cin, Cout) ``matrices`` and (Cout,) ``bias`` (e.g. a BatchNorm folded into
        them); the map (and its backend) comes from ``x`` or ``kernel_map``."""
        if isinstance(x, torch.Tensor):
            if kernel_map is None:
                raise ValueError(f'{type(self).__name__}: a plain (Vin, Cin) tensor input needs its kernel_map; pass a '
                                 'SparseTensor to have the map built from its coordinates')
            return sparse_conv(x, kernel_map, matrices, bias, mode=mode)
        if kernel_map is not None:
            raise ValueError(f'{type(self).__name__}: kernel_map is for plain-tensor inputs; a SparseTensor input '
                             'brings its own maps')
        kmap, out = x.kernel_map(self.geometry)
        buffer = getattr(self, MAX_VOXELS_BUFFER, None)
        if buffer is not None and kmap.layout == 'exact':  # a padded map's num_out is its capacity
            buffer.clamp_(min=kmap.num_out)
        return out.replace_feature(sparse_conv(x.features, kmap, matrices, bias, mode=mode))

    def extra_repr(self):
        """Channels, kind (subm / inverse / conv), kernel geometry and ``indice_key``."""
        kind = 'subm' if self.subm else ('inverse' if self.inverse else 'conv')
        return (f'{self.in_channels}, {self.out_channels}, kind={kind}, kernel_size={self.kernel_size}, '
                f'stride={self.stride}, padding={self.padding}, dilation={self.dilation}, '
                f'indice_key={self.indice_key!r}')


__all__ = ['PAIR_TILE', 'BACKENDS', 'CHUNK_BYTES', 'KernelMap', 'resolve_backend', 'sparse_conv', 'chunk_tiles',
           'conv_module_forward', 'pair_capacity', 'RulebookSparseConv3d']
