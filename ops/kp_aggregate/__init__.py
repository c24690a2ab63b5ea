"""kp_aggregate: fused depthwise / involution aggregation over kernel-point neighbourhoods.

* :func:`kp_aggregate` (KPConvD, KPConvX, KPInv):
  ``y[q, c] = sum_k D[k, c] * A[q, k, c // G] * sum_h infl[q, h, k] * x[nb[q, h], c]`` with optional
  depthwise weights D (K, C) and generated weights A (M, K, W), G = C / W channels per weight.
* :func:`neighbor_aggregate` (point involution by neighbour slot):
  ``y[q, c] = sum_h A[q, h, c // G] * x[nb[q, h], c]`` with A (M, H, W).

Queries run in bounded chunks and backward recomputes, so no (M, H, C) or (M, K, C) tensor is
kept.  Gradients flow to the features, D and A (not to positions or kernel points).
"""
import torch

from .. import _checks
from .._checks import OpValueError
from ..build import register_autograd
from ..kpconv import AGGREGATIONS, INFLUENCES, check_geometry
from ..kpconv._glue import grad_fakes, register_kp_autograd


_OP = 'kp_aggregate'
_NB_OP = 'neighbor_aggregate'


@_checks.register_fake('fsdlite::kp_aggregate')
def _kp_aggregate_fake(q_pts, s_pts, neighbors, features, kernel_points, depthwise, gen_weights, sigma, influence,
                       aggregation):
    return features.new_empty((q_pts.shape[0], features.shape[1]))


@_checks.register_fake('fsdlite::neighbor_aggregate')
def _neighbor_aggregate_fake(neighbors, features, weights):
    return features.new_empty((neighbors.shape[0], features.shape[1]))


@_checks.register_fake('fsdlite::neighbor_aggregate_backward')
def _neighbor_aggregate_backward_fake(grad_out, neighbors, features, weights, output_mask):
    return grad_fakes(features, [features, weights], output_mask)


def _nb_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _nb_backward(ctx, grad_out):
    neighbors, features, weights = ctx.saved_tensors
    mask = [ctx.needs_input_grad[1], ctx.needs_input_grad[2]]
    if not any(mask):
        return None, None, None
    gx, gw = torch.ops.fsdlite.neighbor_aggregate_backward(grad_out, neighbors, features, weights, mask)
    return None, gx if mask[0] else None, gw if mask[1] else None


# Gradients flow to features, depthwise and gen_weights (inputs 3, 5, 6).
register_kp_autograd(_OP, (3, 5, 6))
register_autograd('fsdlite::neighbor_aggregate', _nb_backward, setup_context=_nb_setup_context)


def _check_grouped(op, name, weights, features, rows, slots, slots_what):
    _checks.tensor(op, name, weights, dtype=features.dtype, dim=3,
                   size={0: (rows, 'M'), 1: (slots, slots_what)})
    w, c = weights.shape[2], features.shape[1]
    if w < 1 or c % w:
        raise OpValueError(f'{op}: {name}.shape[2] (weight groups, got {w}) must divide the {c} feature channels')


def kp_aggregate(q_pts, s_pts, neighbors, features, kernel_points, depthwise=None, gen_weights=None, sigma=1.0,
                 influence='linear', aggregation='nearest'):
    """Depthwise / generated-weight aggregation over kernel points (fused).

    Args:
        q_pts (Tensor): (M, 3) query positions.
        s_pts (Tensor): (N, 3) support positions.
        neighbors (Tensor): (M, H) int64/int32, ``N`` pads (shadow neighbour).
        features (Tensor): (N, C) float32/float64.
        kernel_points (Tensor): (K, 3) or (M, K, 3) kernel points (no gradient).
        depthwise (Tensor, optional): (K, C) depthwise weights D.
        gen_weights (Tensor, optional): (M, K, W) generated weights A; channel c uses A[..., c // (C / W)].
        sigma (float): influence extent.
        influence (str): 'constant', 'linear' or 'gaussian' (see :func:`fsdlite.ops.kpconv`).
        aggregation (str): 'sum' or 'nearest' (each neighbour only feeds its closest kernel point).
    Returns:
        Tensor: (M, C).
    """
    neighbors = check_geometry(_OP, q_pts, s_pts, neighbors, kernel_points, features, sigma, influence, aggregation)
    k = kernel_points.shape[-2]
    if depthwise is not None:
        _checks.tensor(_OP, 'depthwise', depthwise, dtype=features.dtype, dim=2,
                       size={0: (k, 'K'), 1: (features.shape[1], 'C')})
    if gen_weights is not None:
        _check_grouped(_OP, 'gen_weights', gen_weights, features, q_pts.shape[0], k, 'K')
    _checks.same_device(_OP, features=features, depthwise=depthwise, gen_weights=gen_weights)
    return torch.ops.fsdlite.kp_aggregate(q_pts, s_pts, neighbors, features, kernel_points, depthwise, gen_weights,
                                          float(sigma), influence, aggregation)


def neighbor_aggregate(neighbors, features, weights):
    """Point involution by neighbour slot (fused): ``y[q,c] = sum_h A[q,h,c//G] x[nb[q,h],c]``.

    Args:
        neighbors (Tensor): (M, H) int64/int32 indices into ``features``; ``N`` pads.
        features (Tensor): (N, C) float32/float64.
        weights (Tensor): (M, H, W) generated weights, W dividing C.
    Returns:
        Tensor: (M, C).
    """
    _checks.tensor(_NB_OP, 'features', features, dtypes=(torch.float32, torch.float64), dim=2)
    _checks.tensor(_NB_OP, 'neighbors', neighbors, dtypes=_checks.INDEX_DTYPES, dim=2)
    _check_grouped(_NB_OP, 'weights', weights, features, neighbors.shape[0], neighbors.shape[1], 'H')
    _checks.same_device(_NB_OP, features=features, neighbors=neighbors, weights=weights)
    return torch.ops.fsdlite.neighbor_aggregate(neighbors.long(), features, weights)


__all__ = ['kp_aggregate', 'neighbor_aggregate']
