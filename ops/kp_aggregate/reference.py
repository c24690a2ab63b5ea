"""Pure-torch references of kp_aggregate and neighbor_aggregate (the naive formulations).

Nearest mode follows KPConvD/KPConvX: each neighbour gathers the (per-query) weights of its
closest kernel point, giving (M, H, C) weights multiplied with the (M, H, C) gathered features;
sum mode correlates into (M, K, C) first.  Autograd differentiates them directly.
"""
import torch

from ..kpconv.reference import gather_neighbors, kp_influences_reference


def expand_groups(weights, channels):
    """(..., W) grouped weights -> (..., C): channel c uses weight c // (C / W)."""
    return weights.repeat_interleave(channels // weights.shape[-1], dim=-1)


def kp_aggregate_reference(q_pts, s_pts, neighbors, features, kernel_points, depthwise=None, gen_weights=None,
                           sigma=1.0, influence='linear', aggregation='sum'):
    """Naive ``y[q,c] = sum_k D[k,c] A[q,k,c//G] sum_h infl[q,h,k] x[nb[q,h],c]``.

    Args:
        features (Tensor): (N, C).
        depthwise (Tensor, optional): (K, C) depthwise kernel weights D.
        gen_weights (Tensor, optional): (M, K, W) generated weights A, W dividing C.
        Other arguments as :func:`fsdlite.ops.kpconv.reference.kp_influences_reference`.
    Returns:
        Tensor: (M, C).
    """
    m, c = neighbors.shape[0], features.shape[1]
    k = kernel_points.shape[-2]
    w = kp_influences_reference(q_pts, s_pts, neighbors, kernel_points, sigma, influence, aggregation)
    eff = features.new_ones((1, k, c))
    if depthwise is not None:
        eff = eff * depthwise[None]
    if gen_weights is not None:
        eff = eff * expand_groups(gen_weights, c)
    eff = eff.expand(m, k, c)
    gathered = gather_neighbors(features, neighbors)  # (M, H, C)
    if aggregation == 'nearest':
        nearest = w.argmax(-1)  # the one non-zero column (any column when all are zero)
        per_neighbor = eff.gather(1, nearest[..., None].expand(-1, -1, c))  # (M, H, C)
        return (w.sum(-1, keepdim=True) * per_neighbor * gathered).sum(1)
    acc = torch.einsum('mhk,mhc->mkc', w, gathered)
    return (acc * eff).sum(1)


def neighbor_aggregate_reference(neighbors, features, weights):
    """Naive point involution ``y[q,c] = sum_h A[q,h,c//G] x[nb[q,h],c]``; weights (M, H, W)."""
    gathered = gather_neighbors(features, neighbors)
    return (gathered * expand_groups(weights, features.shape[1])).sum(1)
