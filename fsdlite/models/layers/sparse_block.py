"""Sparse-conv building blocks: ``sparse conv -> norm -> act`` on a sparse tensor.

The conv layers are fsdlite's :class:`~fsdlite.models.layers.sparse_conv.RulebookSparseConv3d`, with spconv's
parameters and state_dict keys (checkpoints of spconv-built networks load unchanged). What runs them -- spconv's
kernels, fsdlite's fused kernels or the export form -- is chosen by the kernel map
(:func:`~fsdlite.models.layers.sparse_conv.sparse_conv`), not by the layer.
"""
import torch
from torch import nn

from .bn_fold import fold_batch_norm
from .norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG, build_act, build_norm, norm_has_bias
from .sparse_conv import RulebookSparseConv3d

SPARSE_CONV_TYPES = ('SubMConv3d', 'SparseConv3d', 'SparseInverseConv3d')


def build_sparse_conv(conv_type, in_channels, out_channels, kernel_size=3, stride=1, padding=None,
                      indice_key=None, bias=False):
    """Build one sparse 3D convolution of spconv's kind ``conv_type`` (spconv's parameters).

    Args:
        conv_type (str): one of ``SPARSE_CONV_TYPES``.
        in_channels (int): C_in.
        out_channels (int): C_out.
        kernel_size (int): cubic kernel size.
        stride (int): stride of ``SparseConv3d`` (the others use 1).
        padding (int | None): padding of ``SparseConv3d``; default ``kernel_size // 2``.
        indice_key (str | None): spconv rulebook key; an inverse conv must reuse the key of the
            ``SparseConv3d`` it inverts.
        bias (bool): add a bias.
    Returns:
        RulebookSparseConv3d: maps a SparseTensor (V, C_in) to (V', C_out).
    """
    if conv_type not in SPARSE_CONV_TYPES:
        raise ValueError(f'conv_type must be one of {SPARSE_CONV_TYPES}, got {conv_type!r}')
    padding = kernel_size // 2 if padding is None else padding
    if conv_type == 'SparseInverseConv3d' and indice_key is None:
        raise ValueError('SparseInverseConv3d needs the indice_key of the SparseConv3d it inverts, got None')
    return RulebookSparseConv3d(in_channels, out_channels, kernel_size,
                                stride=stride if conv_type == 'SparseConv3d' else 1, padding=padding, bias=bias,
                                subm=conv_type == 'SubMConv3d', inverse=conv_type == 'SparseInverseConv3d',
                                indice_key=indice_key)


def sparse_conv_block(conv_type, in_channels, out_channels, kernel_size=3, stride=1, padding=None,
                      indice_key=None, norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG):
    """``sparse conv -> norm -> act`` as a :class:`SparseConvBlock` (arguments as :func:`build_sparse_conv`).

    The convolution has no bias when a norm follows.
    """
    conv = build_sparse_conv(conv_type, in_channels, out_channels, kernel_size, stride, padding, indice_key,
                             bias=not norm_has_bias(norm_cfg))
    return SparseConvBlock(conv, build_norm(norm_cfg, out_channels), build_act(act_cfg))


class SparseConvBlock(nn.Sequential):
    """A sparse conv followed by feature-wise layers (norm, activation), state_dict keys as spconv's
    ``SparseSequential`` (``0.weight``, ``1.running_mean``, ...).

    Forward: ``SparseTensor -> SparseTensor``, or ``((Vin, Cin) features, kernel_map) -> (num_out, Cout)``. An
    eval-mode BatchNorm after the conv is folded into it when no gradient is needed
    (:func:`~fsdlite.models.layers.bn_fold.fold_batch_norm`; the conv and norm modules are then not called).
    """

    def forward(self, x, kernel_map=None):
        """Run the block on a SparseTensor, or on (Vin, Cin) features over ``kernel_map`` (see the class)."""
        layers = list(self)
        conv = layers[0]
        folded = None if len(layers) < 2 else fold_batch_norm(layers[1], conv.weight, conv.bias, conv.matrices,
                                                              conv.geometry.one_by_one)
        if folded is None:
            out, done = conv(x, kernel_map), 1
        else:
            out, done = conv.run(x, folded.weight, folded.bias, kernel_map), 2
        feats = out if isinstance(out, torch.Tensor) else out.features
        if folded is not None and len(layers) > 2 and type(layers[2]) is nn.ReLU:
            feats, done = feats.relu_(), 3
        for module in layers[done:]:
            feats = module(feats)
        return feats if isinstance(out, torch.Tensor) else out.replace_feature(feats)


__all__ = ['SPARSE_CONV_TYPES', 'build_sparse_conv', 'sparse_conv_block', 'SparseConvBlock']
