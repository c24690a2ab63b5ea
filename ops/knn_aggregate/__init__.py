"""knn_aggregate: fused weighted mean and max over k neighbours (GravNet / HGCalML-style aggregation).

For query ``i`` with neighbour slots ``s`` (``index[i, s]`` a row of ``features`` or the padding
value ``Ns``), ``v[i, s] = weights[i, s] * features[index[i, s]]``:

* ``mean[i]`` = sum of ``v`` over the valid slots / their number (0 when there is none),
* ``max[i]`` = elementwise max of ``v`` over valid slots; NaN never wins, ties pick the first slot,
  0 when no slot qualifies; ``argmax[i]`` holds the winning slot (``k`` when none).

Forward and backward are C++/CUDA kernels that never build the (Nq, k, F) tensor: the backward
keeps only ``features``, ``index``, ``weights`` and the (Nq, F) argmax slots.  Gradients flow to
``features`` and ``weights`` (first order; the backward itself is not differentiable).
"""
from typing import NamedTuple

import torch

from .. import _checks
from ..build import register_autograd


_OP = 'knn_aggregate'


class KnnAggregate(NamedTuple):
    """Outputs of :func:`knn_aggregate`: ``mean`` (Nq, F), ``max`` (Nq, F), ``argmax`` (Nq, F) int64."""
    mean: torch.Tensor
    max: torch.Tensor
    argmax: torch.Tensor


@_checks.register_fake('fsdlite::knn_aggregate')
def _knn_aggregate_fake(features, index, weights):
    shape = (index.shape[0], features.shape[1])
    return features.new_empty(shape), features.new_empty(shape), index.new_empty(shape)


@_checks.register_fake('fsdlite::knn_aggregate_backward')
def _knn_aggregate_backward_fake(grad_mean, grad_max, features, index, weights, argmax, need_features,
                                 need_weights):
    gx = features.new_empty(features.shape if need_features else (0,))
    gw = weights.new_empty(weights.shape if need_weights else (0,))
    return gx, gw


def _setup_context(ctx, inputs, output):
    features, index, weights = inputs
    ctx.save_for_backward(features, index, weights, output[2])
    ctx.mark_non_differentiable(output[2])


def _backward(ctx, grad_mean, grad_max, _grad_argmax):
    features, index, weights, argmax = ctx.saved_tensors
    need_features, _, need_weights = ctx.needs_input_grad
    if not (need_features or need_weights):
        return None, None, None
    grad_mean = torch.zeros_like(features[:0].expand(index.shape[0], -1)) if grad_mean is None else grad_mean
    grad_max = torch.zeros_like(grad_mean) if grad_max is None else grad_max
    gx, gw = torch.ops.fsdlite.knn_aggregate_backward(
        grad_mean.contiguous(), grad_max.contiguous(), features, index, weights, argmax,
        bool(need_features), bool(need_weights))
    return (gx if need_features else None), None, (gw if need_weights else None)


register_autograd('fsdlite::knn_aggregate', _backward, setup_context=_setup_context)


def _validated(features, index, weights):
    _checks.tensor(_OP, 'features', features, floating=True, dim=2)
    _checks.tensor(_OP, 'index', index, dtypes=_checks.INDEX_DTYPES, dim=2)
    _checks.tensor(_OP, 'weights', weights, dtype=features.dtype, dim=2,
                   size={0: (index.shape[0], 'index.shape[0]'), 1: (index.shape[1], 'index.shape[1]')})
    _checks.same_device(_OP, features=features, index=index, weights=weights)
    return index.long()


def knn_aggregate(features, index, weights):
    """Weighted mean and max of each query's k neighbour rows, fused, with its own backward.

    Args:
        features (Tensor): (Ns, F) float16/bfloat16/float32/float64 source rows (e.g. messages).
        index (Tensor): (Nq, k) int64/int32 neighbour rows in ``[0, Ns]``; ``Ns`` = padded slot
            (the convention of :func:`fsdlite.ops.knn`).
        weights (Tensor): (Nq, k), dtype of ``features`` (e.g. ``exp(-10 * sqdist)``).
    Returns:
        KnnAggregate: ``mean`` (Nq, F), ``max`` (Nq, F) (differentiable w.r.t. features and weights)
        and ``argmax`` (Nq, F) int64 winning slot (``k`` where no slot qualifies).
    """
    index = _validated(features, index, weights)
    return KnnAggregate(*torch.ops.fsdlite.knn_aggregate(features, index, weights))


__all__ = ['knn_aggregate', 'KnnAggregate']
