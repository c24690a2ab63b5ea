"""Fixed-shape formulations of the kernel-point ops for ONNX export (``impl='export'``).

Same math as the references (:func:`fsdlite.ops.kpconv.reference.kpconv_reference`,
:func:`fsdlite.ops.kp_aggregate.reference.kp_aggregate_reference`), written for ONNX Runtime, which runs
one whole-tensor kernel per node (no fusion of element-wise chains, slow broadcasts over small trailing
dimensions):

* neighbour rows are gathered with ``index_select`` (ONNX ``Gather``) from a table whose extra last row is
  zero, so shadow slots (index N) contribute zero features and need no validity mask;
* with shared kernel points (K, 3) and ``aggregation='sum'`` the (M, H, K) squared distances are one GEMM:
  ``[d, |d|^2, 1] @ [-2 kp, 1, |kp|^2]^T`` (the influence's 1 / sigma scaling folded into the constant
  right-hand side), then ``1 - sqrt(clip(d2 / sigma^2, 0, 1))`` = linear influence in three passes;
* nearest-kernel-point aggregation and per-query (deformed) kernel points use exact per-coordinate
  differences (the nearest kernel point is chosen on the same values as the reference);
* the contractions are batched ``MatMul`` ((M, K, H) @ (M, H, C)) and one ``(M, K C) @ (K C, C2)`` GEMM
  instead of ``Einsum``; rigid linear KPConv folds ``1 - F`` into that GEMM (a ones column of F gives the
  neighbourhood sums).

Accuracy: float32 rounding level, except that the GEMM distance cancels for a support lying on a kernel point
(d < ~1e-3 sigma, other than the exact zero of the centre kernel point and the query itself), where the linear
influence is off by up to ~sqrt(float32 eps) ~ 3e-4 (tests/models/kpconv/test_layers.py measures both).

Shapes: ``q_pts`` (M, 3), ``s_pts`` (N, 3), ``neighbors`` (M, H) int64 in [0, N] (N = shadow), features
(N, C), kernel points (K, 3) or (M, K, 3).
"""
import torch
import torch.nn.functional as F

from .kp_base import gather_rows


def _gaussian_scale(sigma):
    return -1.0 / (2 * (0.3 * sigma) ** 2)


def _influence_of(d2, sigma, influence):
    """Influence from exact squared distances (same formulas as the reference)."""
    if influence == 'linear':
        return torch.clamp(1 - torch.sqrt(d2) / sigma, min=0)
    if influence == 'gaussian':
        return torch.exp(d2 * _gaussian_scale(sigma))
    return torch.ones_like(d2)


def _exact_sq_distances(rel, kernel_points):
    """(M, H, K) squared distances, coordinate by coordinate; kernel points (K, 3) or (M, K, 3)."""
    kp = kernel_points if kernel_points.dim() == 3 else kernel_points[None]
    d2 = None
    for c in range(3):
        t = rel[..., c:c + 1] - kp[:, None, :, c]
        d2 = t * t if d2 is None else d2 + t * t
    return d2


def _gemm_scaled(rel, kernel_points, scale, ones_column=False):
    """(M, H, K) ``scale * |rel - kp|^2`` for shared kernel points (K, 3): one GEMM
    ``[d, |d|^2, 1] @ (scale [-2 kp, 1, |kp|^2])^T`` (the right-hand side is a constant of the graph).
    ``ones_column``: a (K + 1)-th output column of exact ones (``[0, 0, 0, 0, 1]`` on the right)."""
    kp = kernel_points
    rhs = torch.cat([-2 * kp, kp.new_ones((kp.shape[0], 1)), (kp * kp).sum(1, keepdim=True)], 1) * scale  # (K, 5)
    if ones_column:
        rhs = torch.cat([rhs, torch.eye(5, dtype=kp.dtype, device=kp.device)[4:]], 0)
    lhs = torch.cat([rel, (rel * rel).sum(2, keepdim=True), torch.ones_like(rel[..., :1])], 2)          # (M, H, 5)
    return torch.matmul(lhs, rhs.t())


def _linear_far(rel, kernel_points, sigma, ones_column=False):
    """(M, H, K) ``1 - w`` of the linear influence ``w = max(0, 1 - d / sigma)``: ``sqrt(clip(d^2 / sigma^2, 0, 1))``
    (the clip also absorbs the GEMM's rounding below 0); ``ones_column`` appends a column of ones."""
    return torch.sqrt(torch.clamp(_gemm_scaled(rel, kernel_points, 1.0 / sigma ** 2, ones_column), 0, 1))


def relative_positions(q_pts, s_pts, neighbors):
    """(M, H, 3) neighbour positions relative to their query (shadow slots: ``-q``, finite)."""
    gathered = gather_rows(s_pts, neighbors)
    return gathered - q_pts[:, None].expand_as(gathered)  # ONNX Expand + Sub: faster than a broadcasting Sub


def kp_influences(q_pts, s_pts, neighbors, kernel_points, sigma, influence='linear', aggregation='sum'):
    """Influences of the neighbour slots on the kernel points.

    Returns:
        tuple: ``(w, nearest)``.  ``aggregation='sum'``: ``w`` (M, H, K), ``nearest`` None.  ``'nearest'``:
        ``w`` (M, H) influence of each slot's closest kernel point, ``nearest`` (M, H) its index (first on
        ties).  Shadow slots may have any finite influence: their feature rows are zero.
    """
    rel = relative_positions(q_pts, s_pts, neighbors)
    if aggregation == 'sum' and influence == 'constant':
        return rel.new_ones(neighbors.shape + (kernel_points.shape[-2],)), None
    if aggregation == 'sum' and kernel_points.dim() == 2:
        if influence == 'linear':
            return 1 - _linear_far(rel, kernel_points, sigma), None
        return torch.exp(torch.clamp(_gemm_scaled(rel, kernel_points, _gaussian_scale(sigma)), max=0)), None
    d2 = _exact_sq_distances(rel, kernel_points)
    if aggregation == 'sum':
        return _influence_of(d2, sigma, influence), None
    closest, nearest = d2.min(-1)
    return _influence_of(closest, sigma, influence), nearest


def _correlate(w, nearest, gathered, k):
    """(M, K, C) ``sum_h w[m, h, k] gathered[m, h, c]`` (nearest: w is one-hot in k)."""
    if nearest is not None:
        w = F.one_hot(nearest, k).to(gathered.dtype) * w[..., None]
    return torch.matmul(w.transpose(1, 2), gathered)


def kpconv_export(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations=None, sigma=1.0,
                  influence='linear', aggregation='sum'):
    """``y[q] = sum_k (m[q, k] sum_h w[q, h, k] x[nb[q, h]]) @ W[k]``: features (N, C1), weights (K, C1, C2),
    modulations (M, K) or None -> (M, C2)."""
    k, c1, c2 = weights.shape
    if (influence, aggregation, modulations) == ('linear', 'sum', None) and kernel_points.dim() == 2:
        # sum_k ((1 - F_k)^T g) W_k = sum_k (F_k^T g) (-W_k) + (1^T g) sum_k W_k: F gets a column of ones (the
        # neighbourhood sums), then one GEMM; no (1 - F) pass and no separate reduction
        far = _linear_far(relative_positions(q_pts, s_pts, neighbors), kernel_points, sigma, ones_column=True)
        gathered = gather_rows(features, neighbors)                                    # (M, H, C1)
        if c1 == 1:  # (M, K + 1, 1), the same flat order; this orientation is the faster one in ORT here
            acc = torch.matmul(far.transpose(1, 2), gathered)
        else:
            acc = torch.matmul(gathered.transpose(1, 2), far)                            # (M, C1, K + 1)
        rhs = torch.cat([-weights, weights.sum(0, keepdim=True)], 0).transpose(0, 1)  # (C1, K + 1, C2)
        return acc.reshape(acc.shape[0], c1 * (k + 1)) @ rhs.reshape(c1 * (k + 1), c2)
    w, nearest = kp_influences(q_pts, s_pts, neighbors, kernel_points, sigma, influence, aggregation)
    acc = _correlate(w, nearest, gather_rows(features, neighbors), k)                 # (M, K, C1)
    if modulations is not None:
        acc = acc * modulations[..., None]
    return acc.reshape(acc.shape[0], k * c1) @ weights.reshape(k * c1, c2)


def kp_aggregate_export(q_pts, s_pts, neighbors, features, kernel_points, depthwise=None, gen_weights=None,
                        sigma=1.0, influence='linear', aggregation='sum'):
    """``y[q, c] = sum_k D[k, c] A[q, k, c // G] sum_h infl[q, h, k] x[nb[q, h], c]``: depthwise (K, C) or None,
    gen_weights (M, K, W) or None -> (M, C)."""
    m, c = neighbors.shape[0], features.shape[1]
    k = kernel_points.shape[-2]
    eff = features.new_ones((1, k, c))
    if depthwise is not None:
        eff = eff * depthwise[None]
    if gen_weights is not None:
        w_groups = gen_weights.shape[-1]
        eff = eff * gen_weights[..., None].expand(m, k, w_groups, c // w_groups).reshape(m, k, c)
    w, nearest = kp_influences(q_pts, s_pts, neighbors, kernel_points, sigma, influence, aggregation)
    gathered = gather_rows(features, neighbors)                                        # (M, H, C)
    if nearest is not None:  # each slot takes the weights of its closest kernel point
        per_slot = eff.expand(m, k, c).gather(1, nearest[..., None].expand(-1, -1, c))  # (M, H, C)
        return (w[..., None] * per_slot * gathered).sum(1)
    return (_correlate(w, None, gathered, k) * eff).sum(1)


__all__ = ['relative_positions', 'kp_influences', 'kpconv_export', 'kp_aggregate_export']
