"""Export-time folding of eval-mode BatchNorms into the linear map before them (a copy of the module is changed).

``norm(x @ W + b)`` with an eval-mode BatchNorm is ``x @ (W * s) + (b * s + t)`` per output channel
(:func:`~fsdlite.models.layers.bn_fold.batch_norm_affine`).  The eager layers fold at run time
(:mod:`fsdlite.models.layers.bn_fold`) but not while a graph is exported, so without this step every such norm
would be a ``BatchNormalization`` node of its own after the conv's scatter, where ONNX Runtime cannot fuse it.
:func:`fold_batch_norms` rewrites a deep copy of the graph module instead: every BatchNorm that directly follows a
``nn.Linear`` or a sparse conv (spconv's or ``RulebookSparseConv3d``) in a sequential container
(``LinearNormAct``, the sparse conv blocks) is folded into that layer's weight and bias and replaced by
``nn.Identity``; in-place activations of the copy run out of place (in place, on a view of a padded buffer, they
would be exported as a write back into the buffer).  The model the adapter holds (the PyTorch side of every
comparison) is left as it is.
"""
import copy
from typing import NamedTuple

import torch
from torch import nn

from fsdlite.models.layers.bn_fold import batch_norm_affine, fold_affine
from fsdlite.models.layers.rulebook_conv import conv_geometry, kernel_matrices


class FoldedModule(NamedTuple):
    """Result of :func:`fold_batch_norms`: ``module`` (the changed copy) and ``folded`` (names of the norms folded,
    as ``named_modules`` gives them)."""
    module: nn.Module
    folded: list


def _is_sparse_conv(module):
    """An spconv conv or a ``RulebookSparseConv3d`` (a module :func:`conv_geometry` reads)."""
    return all(hasattr(module, a) for a in ('kernel_size', 'stride', 'subm', 'inverse', 'weight')) \
        and isinstance(getattr(module, 'weight', None), torch.Tensor)


def _fold_into(layer, scale, shift):
    """Multiply ``layer``'s output channels by ``scale`` (C,) and add ``shift``: weight and bias changed in place
    (a bias is added when the layer has none); the folding itself is :func:`fold_affine`, on the matrices the layer
    multiplies by (output channels last), written back in the layer's own layout."""
    weight = layer.weight
    with torch.no_grad():
        if isinstance(layer, nn.Linear):  # (C_out, C_in): the matrix is its transpose
            folded = fold_affine(weight.t(), layer.bias, scale, shift)
            weight.copy_(folded.weight.t())
        else:  # spconv (C_out, kz, ky, kx, C_in); the matrices a conv multiplies by are (K, C_in, C_out)
            one_by_one = conv_geometry(layer).one_by_one
            folded = fold_affine(kernel_matrices(weight, one_by_one), layer.bias, scale, shift)
            weight.copy_(folded.weight.reshape(weight.shape) if one_by_one
                         else folded.weight.permute(2, 0, 1).reshape(weight.shape))
    if layer.bias is None:
        layer.bias = nn.Parameter(folded.bias.to(weight.dtype), requires_grad=False)
    else:
        with torch.no_grad():
            layer.bias.copy_(folded.bias)


def _foldable(layer, norm):
    """``(scale, shift)`` when ``norm`` is an eval-mode BatchNorm over the output channels of ``layer`` (a linear
    map), else None."""
    if not (isinstance(layer, nn.Linear) or _is_sparse_conv(layer)):
        return None
    affine = batch_norm_affine(norm)
    if affine is None or affine[0].numel() != layer.weight.shape[0]:
        return None
    return affine


def fold_batch_norms(module):
    """A deep copy of ``module`` with its foldable BatchNorms folded (see the module docstring).

    Args:
        module (nn.Module): in eval mode (norms in training mode are left alone: they are not affine maps).
    Returns:
        FoldedModule: the copy, same outputs up to float rounding, and the names of the norms folded.
    """
    folded_copy = copy.deepcopy(module)
    names = {id(m): n for n, m in folded_copy.named_modules()}
    folded = []
    for parent in list(folded_copy.modules()):
        if not isinstance(parent, nn.Sequential) and type(parent).__name__ != 'SparseSequential':
            continue
        children = list(parent.named_children())  # execution order of a sequential container
        for (_, layer), (name, norm) in zip(children, children[1:]):
            affine = _foldable(layer, norm)
            if affine is None:
                continue
            _fold_into(layer, *affine)
            folded.append(names[id(norm)])
            parent._modules[name] = nn.Identity()
    for m in folded_copy.modules():  # an in-place activation on a conv's output, a slice of its padded buffer, would
        if getattr(m, 'inplace', False) is True:  # be exported as a slice_scatter back into the buffer (a copy)
            m.inplace = False
    return FoldedModule(folded_copy, folded)


__all__ = ['FoldedModule', 'fold_batch_norms']
