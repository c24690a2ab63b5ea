"""Sparse-conv building blocks: ``sparse conv -> norm -> act`` and sparse-tensor helpers.

The conv layers are spconv's where spconv imports (through :func:`fsdlite.utils.compat.import_spconv`: CPU shims
applied; its import takes ~10 s, so importing this module stays cheap), else fsdlite's own
:class:`~fsdlite.models.layers.sparse_conv.RulebookSparseConv3d` in an ``nn.Sequential`` (a machine without
spconv, or ``FSDLITE_NO_SPCONV=1``). Both have the same parameters and state_dict keys, so checkpoints move between
them unchanged; networks on fsdlite's layers run their convolutions with ``fsdlite.ops.sparse_conv`` (CPU and
CUDA).
"""
import torch
from torch import nn

from fsdlite.utils import compat

from .norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG, build_act, build_norm, norm_has_bias
from .sparse_conv import RulebookSparseConv3d

SPARSE_CONV_TYPES = ('SubMConv3d', 'SparseConv3d', 'SparseInverseConv3d')


def build_sparse_conv(conv_type, in_channels, out_channels, kernel_size=3, stride=1, padding=None,
                      indice_key=None, bias=False):
    """Build one spconv 3D convolution.

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
        spconv module mapping a SparseConvTensor (V, C_in) to (V', C_out), or without spconv a
        :class:`RulebookSparseConv3d` with the same geometry and parameters.
    """
    if conv_type not in SPARSE_CONV_TYPES:
        raise ValueError(f'conv_type must be one of {SPARSE_CONV_TYPES}, got {conv_type!r}')
    padding = kernel_size // 2 if padding is None else padding
    if conv_type == 'SparseInverseConv3d' and indice_key is None:
        raise ValueError('SparseInverseConv3d needs the indice_key of the SparseConv3d it inverts, got None')
    if not compat.spconv_available():
        return RulebookSparseConv3d(in_channels, out_channels, kernel_size,
                                    stride=stride if conv_type == 'SparseConv3d' else 1, padding=padding, bias=bias,
                                    subm=conv_type == 'SubMConv3d', inverse=conv_type == 'SparseInverseConv3d',
                                    indice_key=indice_key)
    spconv = compat.import_spconv()
    if conv_type == 'SubMConv3d':
        return spconv.SubMConv3d(in_channels, out_channels, kernel_size, padding=padding, bias=bias,
                                 indice_key=indice_key)
    if conv_type == 'SparseConv3d':
        return spconv.SparseConv3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                   bias=bias, indice_key=indice_key)
    return spconv.SparseInverseConv3d(in_channels, out_channels, kernel_size, bias=bias, indice_key=indice_key)


def sparse_conv_block(conv_type, in_channels, out_channels, kernel_size=3, stride=1, padding=None,
                      indice_key=None, norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG):
    """``sparse conv -> norm -> act`` as an ``spconv.SparseSequential`` (arguments as :func:`build_sparse_conv`).

    The convolution has no bias when a norm follows.
    """
    conv = build_sparse_conv(conv_type, in_channels, out_channels, kernel_size, stride, padding, indice_key,
                             bias=not norm_has_bias(norm_cfg))
    return sparse_sequential(conv, build_norm(norm_cfg, out_channels), build_act(act_cfg))


def sparse_sequential(*modules):
    """``spconv.SparseSequential`` of ``modules`` (plain modules act on the features); ``nn.Sequential`` without
    spconv (its layers are run by the network, never called on a sparse tensor)."""
    if not compat.spconv_available():
        return nn.Sequential(*modules)
    return compat.import_spconv().SparseSequential(*modules)


def is_spconv_module(module):
    """True when ``module`` (or a conv inside it) is an spconv layer, which only spconv can run."""
    return any(type(m).__module__.startswith('spconv.') for m in module.modules())


def choose_conv_backend(conv_backend, layers, device):
    """The backend that runs a network's sparse convs: ``conv_backend`` (``'auto'``, ``'spconv'`` or ``'fsdlite'``)
    with ``'auto'`` decided for ``device``: ``'fsdlite'`` on the CPU (training and inference); on CUDA ``'spconv'``
    when ``layers`` are spconv's and spconv runs there (it imports and a first tiny conv on the device works), else
    ``'fsdlite'`` (its CUDA kernels run spconv's layers too, from their weights).

    Args:
        conv_backend (str): the network's setting.
        layers (nn.Module): the network's layers (or one block of them: all are built alike).
        device (torch.device): where the features are.
    Raises:
        RuntimeError: ``'spconv'`` but the layers are not spconv's or spconv does not import.
    """
    spconv_layers = is_spconv_module(layers)
    if conv_backend == 'spconv' and not (spconv_layers and compat.spconv_available()):
        why = ("the layers were built without spconv (fsdlite's own)" if not spconv_layers
               else compat.spconv_unavailable_reason())
        raise RuntimeError(f"SparseUNet(conv_backend='spconv') cannot run: {why}; use conv_backend='auto' or "
                           "'fsdlite' (fsdlite's own kernels, CPU and CUDA)")
    if conv_backend != 'auto':
        return conv_backend
    if torch.device(device).type == 'cuda' and spconv_layers and compat.spconv_runs_on(device):
        return 'spconv'
    return 'fsdlite'


def to_sparse_tensor(features, voxel_coors, sparse_shape, batch_size):
    """Wrap (V, C) features and (V, 4) ``[b, z, y, x]`` coordinates into an ``spconv.SparseConvTensor``.

    Args:
        features (Tensor): (V, C) float.
        voxel_coors (Tensor): (V, 4) integer ``[b, z, y, x]``; converted to int32 as spconv needs.
        sparse_shape (Sequence[int]): grid size ``(nz, ny, nx)``.
        batch_size (int): B (samples may have no voxels).
    """
    spconv = compat.import_spconv()
    if voxel_coors.dim() != 2 or voxel_coors.shape[1] != 4:
        raise ValueError(f'voxel_coors must be (V, 4) [b, z, y, x], got shape {tuple(voxel_coors.shape)}')
    if features.shape[0] != voxel_coors.shape[0]:
        raise ValueError(f'features has {features.shape[0]} rows but voxel_coors has {voxel_coors.shape[0]}')
    return spconv.SparseConvTensor(features, voxel_coors.to(torch.int32).contiguous(),
                                   [int(s) for s in sparse_shape], int(batch_size))


__all__ = ['SPARSE_CONV_TYPES', 'build_sparse_conv', 'sparse_conv_block', 'sparse_sequential', 'is_spconv_module',
           'choose_conv_backend', 'to_sparse_tensor']
