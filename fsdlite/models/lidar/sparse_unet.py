"""Sparse 3D UNet whose output voxel set (and row order) equals its input.

A plain stack of conv blocks run on a :class:`~fsdlite.models.layers.sparse_tensor.SparseTensor`, which builds and
shares the kernel maps; fixed-shape runs take padded maps from :class:`~fsdlite.models.layers.conv_plan.ConvPlan`
(:meth:`SparseUNet.conv_plan`).  The convolutions run in :func:`~fsdlite.models.layers.sparse_conv.sparse_conv`.
"""
import contextlib

import torch
from torch import nn

from fsdlite.registry import MODELS
from fsdlite.utils.compat import spconv_available

from ..layers.channels import stage_channels
from ..layers.conv_plan import ConvPlan
from ..layers.norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG
from ..layers.sparse_block import sparse_conv_block
from ..layers.sparse_conv import BACKENDS, resolve_backend
from ..layers.sparse_tensor import SparseTensor, voxel_order
from ..layers.voxel_geometry import voxel_grid

_PLAN_ATTR = '_fsdlite_conv_plan'  # (conv module ids and levels, ConvPlan) of the last conv_plan() call


def _call(block, x):
    return block(x)


def _sum_channel_groups(features, out_channels):
    """(V, k * out_channels) -> (V, out_channels) by summing groups of k consecutive channels.

    Written as k - 1 adds of strided column slices: ``view(V, C, k).sum(2)`` (a reduction over a last axis of 2)
    takes ~9x longer on the CPU for the same bits at k = 2.
    """
    k = features.shape[1] // out_channels
    total = features[:, 0::k]
    for j in range(1, k):
        total = total + features[:, j::k]
    return total


@MODELS.register_module()
class SparseUNet(nn.Module):
    """Encoder-decoder of sparse convolutions (FSD's SimpleSparseUNet layout).

    * ``conv_input``: SubMConv3d ``in_channels -> base_channels``.
    * encoder stage ``s`` has one conv per entry of ``encoder_channels[s]``; stage 0 keeps the input
      resolution (SubMConv3d only), each later stage starts with a stride-2 SparseConv3d followed by
      SubMConv3d layers.
    * decoder stage ``j`` (deepest first; ``s = S - 1 - j``) has ``decoder_channels[j] =
      (lateral, merge, up)``: a SubMConv3d lateral block on the encoder output of stage ``s``, a
      SubMConv3d merge of ``[incoming, lateral]`` plus a parameter-free shortcut (sum of channel groups,
      so ``lateral + incoming`` must be a multiple of ``merge``), then an inverse conv back to stage
      ``s - 1``'s voxels (``up`` channels) or, for ``s = 0``, a SubMConv3d output layer.

    Because every upsampling inverts a recorded downsampling and the last layer is submanifold, the
    output features are row-aligned with the input voxels.  Channels and depths are flat per-stage
    tuples, so a slimmed network is just a different config.

    Args:
        in_channels (int): C_in of the voxel features.
        voxel_size, point_range: voxel grid; the sparse shape is ``fsdlite.ops.grid_shape`` of them.
        base_channels (int): width of ``conv_input``.
        encoder_channels (Sequence[Sequence[int]]): per-stage conv widths, e.g. ``((16,), (32, 32))``.
        decoder_channels (Sequence[Sequence[int]]): per decoder stage ``(lateral, merge, up)``; one per
            encoder stage.
        norm_cfg, act_cfg (dict | None): norm / activation after every conv.
        conv_backend (str): what runs the eager forward's convolutions (the kernel maps are fsdlite's in every
            case): ``'spconv'`` (spconv's gather-GEMM-scatter kernels), ``'fsdlite'`` (the fused
            ``fsdlite.ops.sparse_conv`` kernel and its weight-gradient kernel: no per-offset Python loop, faster on
            the CPU, most for narrow layers) or ``'auto'`` (``'fsdlite'`` for CPU tensors; for CUDA tensors
            ``'spconv'`` when spconv imports and runs there, else ``'fsdlite'``'s CUDA kernels):
            :func:`~fsdlite.models.layers.sparse_conv.resolve_backend`. Same weights, same results up to float
            rounding; all train. ``'spconv'`` raises where spconv does not import (or ``FSDLITE_NO_SPCONV=1``).
    """
    CONV_BACKENDS = BACKENDS

    def __init__(self, in_channels, voxel_size, point_range, base_channels=16,
                 encoder_channels=((16,), (32, 32), (64, 64)),
                 decoder_channels=((64, 64, 32), (32, 32, 16), (16, 16, 16)),
                 norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG, conv_backend='auto'):
        super().__init__()
        if conv_backend not in self.CONV_BACKENDS:
            raise ValueError(f'conv_backend must be one of {self.CONV_BACKENDS}, got {conv_backend!r}')
        self.conv_backend = conv_backend
        _, _, self.sparse_shape = voxel_grid(voxel_size, point_range)
        self.encoder_channels = stage_channels('encoder_channels', encoder_channels)
        self.decoder_channels = stage_channels('decoder_channels', decoder_channels, length=3)
        if len(self.decoder_channels) != len(self.encoder_channels):
            raise ValueError(f'decoder_channels needs one (lateral, merge, up) entry per encoder stage '
                             f'({len(self.encoder_channels)}), got {len(self.decoder_channels)}: {decoder_channels!r}')
        self.in_channels = int(in_channels)
        blk = dict(norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.conv_input = sparse_conv_block('SubMConv3d', self.in_channels, base_channels, indice_key='subm1', **blk)
        self.encoder = nn.ModuleList()
        prev = base_channels
        for s, widths in enumerate(self.encoder_channels):
            layers = []
            for k, c in enumerate(widths):
                if s > 0 and k == 0:
                    layers.append(sparse_conv_block('SparseConv3d', prev, c, stride=2, padding=1,
                                                    indice_key=f'spconv{s + 1}', **blk))
                else:
                    layers.append(sparse_conv_block('SubMConv3d', prev, c, indice_key=f'subm{s + 1}', **blk))
                prev = c
            self.encoder.append(nn.Sequential(*layers))
        self.lateral, self.merge, self.upsample = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        num_stages = len(self.encoder_channels)
        for j, (lat, mer, up) in enumerate(self.decoder_channels):
            s = num_stages - 1 - j
            skip = self.encoder_channels[s][-1]
            if (lat + prev) % mer:
                raise ValueError(f'decoder_channels[{j}]={self.decoder_channels[j]!r}: lateral ({lat}) + incoming '
                                 f'({prev}) channels must be a multiple of merge ({mer}) for the shortcut')
            self.lateral.append(sparse_conv_block('SubMConv3d', skip, lat, indice_key=f'subm{s + 1}', **blk))
            self.merge.append(sparse_conv_block('SubMConv3d', lat + prev, mer, indice_key=f'subm{s + 1}', **blk))
            if s > 0:
                self.upsample.append(sparse_conv_block('SparseInverseConv3d', mer, up, indice_key=f'spconv{s + 1}',
                                                       **blk))
            else:
                self.upsample.append(sparse_conv_block('SubMConv3d', mer, up, indice_key='subm1', **blk))
            prev = up
        self.out_channels = prev

    def forward(self, voxel_feats, voxel_coors=None, batch_size=None, kernel_maps=None):
        """Run the UNet on voxels (dynamic) or on given kernel maps (fixed shapes).

        Args:
            voxel_feats (Tensor): (V, in_channels) float features (V >= 1); padded to ``max_voxels[0]`` rows with
                ``kernel_maps``.
            voxel_coors (Tensor): (V, 4) int ``[b, z, y, x]`` inside ``sparse_shape``, unique rows (dynamic run).
            batch_size (int): B (dynamic run).
            kernel_maps (Sequence[KernelMap], optional): fixed-shape run: one padded (tiled or dense)
                :class:`~fsdlite.models.layers.sparse_conv.KernelMap` per conv in execution order (:meth:`conv_plan`:
                ``tiled_kernel_maps`` / ``dense_kernel_maps``), handed to the blocks through a SparseTensor's map
                cache (:meth:`ConvPlan.fixed_tensor`); every conv then runs in standard ops, spconv's weights
                unchanged.
        Returns:
            Tensor: (V, out_channels) features, row ``i`` belonging to ``voxel_coors[i]`` (with ``kernel_maps``:
            row-aligned with the padded input, padding rows unspecified).
        """
        if kernel_maps is not None:
            return self.forward_sparse(self.conv_plan().fixed_tensor(voxel_feats, kernel_maps, batch_size)).features
        if voxel_feats.dim() != 2 or voxel_feats.shape[1] != self.in_channels:
            raise ValueError(f'voxel_feats must have shape (V, {self.in_channels}), got {tuple(voxel_feats.shape)}')
        if voxel_feats.shape[0] == 0:
            raise ValueError('SparseUNet needs at least one voxel (V >= 1); callers must handle empty batches')
        backend, order = self.resolved_conv_backend(voxel_feats), voxel_order(voxel_coors, self.sparse_shape)
        if order is None:
            return self.forward_sparse(SparseTensor(voxel_feats, voxel_coors, self.sparse_shape, batch_size,
                                                    backend=backend)).features
        # run on the voxels sorted by (b, z, y, x) (the rulebook ops' fast paths); the sorted copy of the input is
        # passed on without a name here, so it is freed after the first conv
        out = self.forward_sparse(SparseTensor(voxel_feats.index_select(0, order), voxel_coors.index_select(0, order),
                                               self.sparse_shape, batch_size, backend=backend)).features
        return torch.empty_like(out).index_copy_(0, order, out)

    def resolved_conv_backend(self, voxel_feats):
        """``'spconv'`` or ``'fsdlite'``: :attr:`conv_backend` with ``'auto'`` decided for the device of
        ``voxel_feats`` (:func:`~fsdlite.models.layers.sparse_conv.resolve_backend`)."""
        try:
            return resolve_backend(self.conv_backend, voxel_feats.device)
        except RuntimeError as exc:
            raise RuntimeError(f"SparseUNet(conv_backend={self.conv_backend!r}): {exc}") from None

    def conv_blocks(self):
        """``(block, level)`` of every conv block in execution order (the order of the kernel maps)."""
        yield self.conv_input, 0
        for s, stage in enumerate(self.encoder):
            for block in stage:
                yield block, s
        num_stages = len(self.encoder)
        for j, (lateral, merge, upsample) in enumerate(zip(self.lateral, self.merge, self.upsample)):
            s = num_stages - 1 - j
            yield lateral, s
            yield merge, s
            yield upsample, s

    def conv_plan(self):
        """The :class:`~fsdlite.models.layers.conv_plan.ConvPlan` of this UNet's convs (builds its kernel maps).

        Built once and kept while the conv modules stay the same objects (a module replaced, e.g. by slimming,
        builds a new plan): reading every conv's geometry is Python work each forward and pre-op would repeat.
        """
        blocks = [(block[0], level) for block, level in self.conv_blocks()]
        key = tuple((id(conv), level) for conv, level in blocks)
        cached = self.__dict__.get(_PLAN_ATTR)
        if cached is None or cached[0] != key:
            cached = (key, ConvPlan(blocks, self.sparse_shape, len(self.encoder)))
            self.__dict__[_PLAN_ATTR] = cached
        return cached[1]

    def forward_sparse(self, x, run=None):
        """The UNet on a :class:`~fsdlite.models.layers.sparse_tensor.SparseTensor` of ``in_channels`` features ->
        the tensor of ``out_channels`` features on the same voxels (rows in the same order).

        Args:
            x: the input (also any sparse tensor with ``features`` and ``replace_feature``).
            run (callable, optional): ``run(block, x)`` runs one conv block (default: calls it on ``x``).
        """
        run = run or _call
        x = run(self.conv_input, x)
        skips = []
        for stage in self.encoder:
            for block in stage:
                x = run(block, x)
            skips.append(x)
        for lateral, merge, upsample, skip in zip(self.lateral, self.merge, self.upsample, reversed(skips)):
            lat = run(lateral, skip)
            cat = torch.cat([x.features, lat.features], 1)
            merged = run(merge, lat.replace_feature(cat))
            x = run(upsample, merged.replace_feature(merged.features
                                                    + _sum_channel_groups(cat, merged.features.shape[1])))
        return x


@contextlib.contextmanager
def using_conv_backend(model, conv_backend):
    """Inside the block every ``SparseUNet`` of ``model`` runs its convolutions on ``conv_backend`` (``'spconv'``,
    ``'fsdlite'`` or ``'auto'``; None changes nothing); the previous settings come back afterwards.  ``'spconv'``
    falls back to ``'auto'`` where spconv does not import (the same values).  Yields ``model``."""
    backends = [(m, m.conv_backend) for m in model.modules() if isinstance(m, SparseUNet)]
    if conv_backend is not None:
        runnable = conv_backend != 'spconv' or spconv_available()
        for module, _ in backends:
            module.conv_backend = conv_backend if runnable else 'auto'
    try:
        yield model
    finally:
        for module, backend in backends:
            module.conv_backend = backend


__all__ = ['SparseUNet', 'using_conv_backend']
