"""Pure-torch references of the kernel-point ops (the einsum formulation of KPConv-PyTorch).

They materialise the (M, H, K) influences, the (M, H, C) gathered features and the (M, K, C)
correlation, so autograd differentiates them directly; tests compare the fused ops against them
and the modules' ``impl='naive'`` path runs them.
"""
import torch
import torch.nn.functional as F


def kp_influences_reference(q_pts, s_pts, neighbors, kernel_points, sigma, influence='linear',
                            aggregation='sum'):
    """Influence of every neighbour slot on every kernel point.

    Args:
        q_pts (Tensor): (M, 3) query positions.
        s_pts (Tensor): (N, 3) support positions.
        neighbors (Tensor): (M, H) int64 indices into ``s_pts``; ``N`` is the shadow neighbour.
        kernel_points (Tensor): (K, 3) shared or (M, K, 3) per-query kernel points (differentiable).
        sigma (float): influence extent.
        influence (str): 'constant' (1), 'linear' (max(0, 1 - d / sigma)) or 'gaussian'
            (exp(-d^2 / (2 (0.3 sigma)^2))).
        aggregation (str): 'sum' (every kernel point) or 'nearest' (closest kernel point only,
            first one on ties).
    Returns:
        Tensor: (M, H, K) influences, zero for shadow neighbours.
    """
    m, h = neighbors.shape
    k = kernel_points.shape[-2]
    n = s_pts.shape[0]
    if n == 0 or m == 0:
        return kernel_points.new_zeros((m, h, k)) * kernel_points.sum()
    valid = neighbors < n
    diff = s_pts[neighbors.clamp(max=n - 1)] - q_pts[:, None]  # (M, H, 3)
    kp = kernel_points if kernel_points.dim() == 3 else kernel_points[None]
    offsets = diff[:, :, None, :] - kp[:, None]  # (M, H, K, 3)
    d2 = (offsets * offsets).sum(-1)
    if influence == 'constant':
        w = torch.ones_like(d2)
    elif influence == 'linear':
        w = torch.clamp(1 - torch.linalg.vector_norm(offsets, dim=-1) / sigma, min=0)
    elif influence == 'gaussian':
        w = torch.exp(-d2 / (2 * (0.3 * sigma) ** 2))
    else:
        raise ValueError(f"influence must be 'constant', 'linear' or 'gaussian', got {influence!r}")
    if aggregation == 'nearest':
        w = w * F.one_hot(d2.detach().argmin(-1), k).to(w.dtype)
    elif aggregation != 'sum':
        raise ValueError(f"aggregation must be 'sum' or 'nearest', got {aggregation!r}")
    return w * valid[..., None].to(w.dtype)


def gather_neighbors(features, neighbors):
    """(M, H, C) features of the neighbours, zero rows for the shadow index N."""
    padded = torch.cat([features, features.new_zeros((1, features.shape[1]))], 0)
    return padded[neighbors]


def kpconv_reference(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations=None, sigma=1.0,
                     influence='linear', aggregation='sum'):
    """Naive kernel-point convolution ``y[q] = sum_k (m[q,k] sum_h w[q,h,k] x[nb[q,h]]) @ W[k]``.

    Args:
        features (Tensor): (N, C1).
        weights (Tensor): (K, C1, C2).
        modulations (Tensor, optional): (M, K) per-query kernel-point modulations.
        Other arguments as :func:`kp_influences_reference`.
    Returns:
        Tensor: (M, C2).
    """
    w = kp_influences_reference(q_pts, s_pts, neighbors, kernel_points, sigma, influence, aggregation)
    acc = torch.einsum('mhk,mhc->mkc', w, gather_neighbors(features, neighbors))
    if modulations is not None:
        acc = acc * modulations[..., None]
    return torch.einsum('mkc,kcd->md', acc, weights)
