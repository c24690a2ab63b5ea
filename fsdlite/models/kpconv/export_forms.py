"""Fixed-shape formulations of the kernel-point ops for ONNX export (the layers' forms in the fixed execution mode).

Same math as the references (:func:`fsdlite.ops.kpconv.reference.kpconv_reference`,
:func:`fsdlite.ops.kp_aggregate.reference.kp_aggregate_reference`), written for ONNX Runtime, which runs
one whole-tensor kernel per node (no fusion of element-wise chains, slow broadcasts over small trailing
dimensions):

* neighbour rows are gathered with ``index_select`` (ONNX ``Gather``) from a table whose extra last row is
  zero, so shadow slots (index N) contribute zero features and need no validity mask;
* with shared kernel points (K, 3) and ``aggregation='sum'`` the (M, H, K) squared distances are one GEMM:
  ``[d, d * d, 1] @ [-2 kp, 1, 1, 1, |kp|^2]^T`` (the influence's 1 / sigma scaling folded into the constant
  right-hand side), then ``1 - sqrt(clip(d2 / sigma^2, 0, 1))`` = linear influence in three passes;
* nearest-kernel-point aggregation and per-query (deformed) kernel points use exact per-coordinate
  differences (the nearest kernel point is chosen on the same values as the reference);
* the contractions are batched ``MatMul`` ((M, K, H) @ (M, H, C)) and one ``(M, K C) @ (K C, C2)`` GEMM
  instead of ``Einsum``; rigid linear KPConv folds ``1 - F`` into that GEMM (a ones column of F gives the
  neighbourhood sums);
* queries run in chunks of :data:`CHUNK_ELEMENTS` influence entries, so that each chunk's chain of whole-tensor
  nodes stays in cache.

Accuracy: float32 rounding level, except that the GEMM distance cancels for a support lying on a kernel point
(d < ~1e-3 sigma, other than the exact zero of the centre kernel point and the query itself), where the linear
influence is off by up to ~sqrt(float32 eps) ~ 3e-4 (tests/models/kpconv/test_layers.py measures both).

Shapes: ``q_pts`` (M, 3), ``s_pts`` (N, 3), ``neighbors`` (M, H) int64 in [0, N] (N = shadow), features
(N, C), kernel points (K, 3) or (M, K, 3).
"""
import torch
import torch.nn.functional as F

from ...structures.padded import with_dump_row

#: Elements of one (rows, H, K + 1) influence block: queries are processed in chunks of ~1 MiB of float32 blocks,
#: so that each chunk's GEMM -> Clip -> Sqrt -> MatMul chain stays in a per-core L2 cache (ONNX Runtime runs every
#: node over its whole tensor; unchunked, the level-0 blocks of a scene are ~13 MB and every pass goes to memory).
CHUNK_ELEMENTS = 1 << 18


def gather_rows(x, index, shadowed=False):
    """Rows of ``x`` (N, C) at ``index`` (M, H) in [0, N] -> (M, H, C); the shadow index N gives a zero row.

    ``shadowed``: ``x`` already ends with that zero row (:func:`~fsdlite.structures.padded.with_dump_row`, built
    once for many gathers).
    ``index_select`` on the flattened index exports to one ONNX ``Gather`` (advanced indexing gives ``GatherND``,
    several times slower in ONNX Runtime; ``F.embedding`` would save the reshapes but fsdlite.slim's tracer has no
    rule for it).
    """
    table = x if shadowed else with_dump_row(x)
    return table.index_select(0, index.reshape(-1)).view(index.shape[0], index.shape[1], table.shape[1])


def _over_chunks(fn, per_query, *tensors):
    """``torch.cat([fn(*chunk) ...])`` over chunks of at most ``CHUNK_ELEMENTS // per_query`` queries, slicing the
    per-query ``tensors`` (None stays None); one call when they all fit."""
    m = tensors[0].shape[0]
    rows = max(1, CHUNK_ELEMENTS // max(per_query, 1))
    if m <= rows:
        return fn(*tensors)
    return torch.cat([fn(*(None if t is None else t[a:a + rows] for t in tensors)) for a in range(0, m, rows)])


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


def _distance_rhs(kernel_points, scale, ones_column=False):
    """(K, 5) constant right-hand side ``scale [-2 kp, 1, |kp|^2]`` of the GEMM distance; ``ones_column`` appends
    the row ``[0, 0, 0, 0, 1]`` (an output column of exact ones)."""
    kp = kernel_points
    rhs = torch.cat([-2 * kp, kp.new_ones((kp.shape[0], 1)), (kp * kp).sum(1, keepdim=True)], 1) * scale
    if ones_column:
        rhs = torch.cat([rhs, torch.eye(5, dtype=kp.dtype, device=kp.device)[4:]], 0)
    return rhs


def _gemm_scaled(rel, rhs):
    """(M, H, K) ``scale * |rel - kp_k|^2`` = ``[d, d * d, 1] @ rhs7^T``, ``rhs7`` = ``rhs`` (from
    :func:`_distance_rhs`) with its ``|d|^2`` column repeated per coordinate (no separate reduction of d * d)."""
    rhs7 = torch.cat([rhs[:, :3], rhs[:, 3:4].expand(-1, 3), rhs[:, 4:]], 1)                         # (K, 7)
    lhs = torch.cat([rel, rel * rel, torch.ones_like(rel[..., :1])], 2)                                # (M, H, 7)
    return torch.matmul(lhs, rhs7.t())


def _linear_far(rel, rhs):
    """(M, H, K) ``1 - w`` of the linear influence ``w = max(0, 1 - d / sigma)``: ``sqrt(clip(d^2 / sigma^2, 0, 1))``
    (``rhs`` scaled by 1 / sigma^2; the clip also absorbs the GEMM's rounding below 0)."""
    return torch.sqrt(torch.clamp(_gemm_scaled(rel, rhs), 0, 1))


def relative_positions(q_pts, s_pts, neighbors, shadowed=False):
    """(M, H, 3) neighbour positions relative to their query (shadow slots: ``-q``, finite); ``shadowed``: ``s_pts``
    already ends with the shadow row (see :func:`gather_rows`)."""
    gathered = gather_rows(s_pts, neighbors, shadowed)
    return gathered - q_pts[:, None].expand_as(gathered)  # ONNX Expand + Sub: faster than a broadcasting Sub


def kp_influences(q_pts, s_pts, neighbors, kernel_points, sigma, influence='linear', aggregation='sum',
                  shadowed=False):
    """Influences of the neighbour slots on the kernel points (``shadowed``: ``s_pts`` ends with the shadow row).

    Returns:
        tuple: ``(w, nearest)``.  ``aggregation='sum'``: ``w`` (M, H, K), ``nearest`` None.  ``'nearest'``:
        ``w`` (M, H) influence of each slot's closest kernel point, ``nearest`` (M, H) its index (first on
        ties).  Shadow slots may have any finite influence: their feature rows are zero.
    """
    rel = relative_positions(q_pts, s_pts, neighbors, shadowed)
    if aggregation == 'sum' and influence == 'constant':
        return rel.new_ones(neighbors.shape + (kernel_points.shape[-2],)), None
    if aggregation == 'sum' and kernel_points.dim() == 2:
        if influence == 'linear':
            return 1 - _linear_far(rel, _distance_rhs(kernel_points, 1.0 / sigma ** 2)), None
        scaled = _gemm_scaled(rel, _distance_rhs(kernel_points, _gaussian_scale(sigma)))
        return torch.exp(torch.clamp(scaled, max=0)), None
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


def _kpconv_linear_sum(q_pts, s_pts, neighbors, features, kernel_points, weights, sigma):
    """Rigid linear KPConv: ``sum_k ((1 - F_k)^T g) W_k = sum_k (F_k^T g) (-W_k) + (1^T g) sum_k W_k`` with
    ``F = sqrt(clip(d^2 / sigma^2, 0, 1))`` and a row of ones in F (the neighbourhood sums): one GEMM at the end,
    no ``1 - F`` pass and no separate reduction; F (m, H, K + 1) is one 2-D GEMM per chunk."""
    k, c1, c2 = weights.shape
    distance_rhs = _distance_rhs(kernel_points, 1.0 / sigma ** 2, ones_column=True)           # (K + 1, 5)
    weights_rhs = torch.cat([-weights, weights.sum(0, keepdim=True)], 0).reshape((k + 1) * c1, c2)
    s_table, f_table = with_dump_row(s_pts), with_dump_row(features)                      # once for all chunks

    def block(q, nb):
        far = _linear_far(relative_positions(q, s_table, nb, True), distance_rhs)           # (m, H, K + 1)
        acc = torch.matmul(far.transpose(1, 2), gather_rows(f_table, nb, True))             # (m, K + 1, C1)
        return acc.reshape(acc.shape[0], (k + 1) * c1) @ weights_rhs

    return _over_chunks(block, neighbors.shape[1] * (k + 1), q_pts, neighbors)


def kpconv_export(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations=None, sigma=1.0,
                  influence='linear', aggregation='sum'):
    """``y[q] = sum_k (m[q, k] sum_h w[q, h, k] x[nb[q, h]]) @ W[k]``: features (N, C1), weights (K, C1, C2),
    modulations (M, K) or None -> (M, C2)."""
    k, c1, c2 = weights.shape
    if (influence, aggregation, modulations) == ('linear', 'sum', None) and kernel_points.dim() == 2:
        return _kpconv_linear_sum(q_pts, s_pts, neighbors, features, kernel_points, weights, sigma)

    s_table, f_table = with_dump_row(s_pts), with_dump_row(features)

    def block(q, nb, mod, kp):
        kp = kernel_points if kp is None else kp
        w, nearest = kp_influences(q, s_table, nb, kp, sigma, influence, aggregation, shadowed=True)
        acc = _correlate(w, nearest, gather_rows(f_table, nb, True), k)                    # (m, K, C1)
        if mod is not None:
            acc = acc * mod[..., None]
        return acc.reshape(acc.shape[0], k * c1) @ weights.reshape(k * c1, c2)

    own_kp = kernel_points if kernel_points.dim() == 3 else None
    return _over_chunks(block, neighbors.shape[1] * k, q_pts, neighbors, modulations, own_kp)


def kp_aggregate_export(q_pts, s_pts, neighbors, features, kernel_points, depthwise=None, gen_weights=None,
                        sigma=1.0, influence='linear', aggregation='sum'):
    """``y[q, c] = sum_k D[k, c] A[q, k, c // G] sum_h infl[q, h, k] x[nb[q, h], c]``: depthwise (K, C) or None,
    gen_weights (M, K, W) or None -> (M, C)."""
    c, k = features.shape[1], kernel_points.shape[-2]
    s_table, f_table = with_dump_row(s_pts), with_dump_row(features)

    def block(q, nb, gen, kp):
        m = nb.shape[0]
        kp = kernel_points if kp is None else kp
        eff = features.new_ones((1, k, c))
        if depthwise is not None:
            eff = eff * depthwise[None]
        if gen is not None:
            groups = gen.shape[-1]
            eff = eff * gen[..., None].expand(m, k, groups, c // groups).reshape(m, k, c)
        w, nearest = kp_influences(q, s_table, nb, kp, sigma, influence, aggregation, shadowed=True)
        gathered = gather_rows(f_table, nb, True)                                           # (m, H, C)
        if nearest is not None:  # each slot takes the weights of its closest kernel point
            per_slot = eff.expand(m, k, c).gather(1, nearest[..., None].expand(-1, -1, c))  # (m, H, C)
            return (w[..., None] * per_slot * gathered).sum(1)
        return (_correlate(w, None, gathered, k) * eff).sum(1)

    own_kp = kernel_points if kernel_points.dim() == 3 else None
    return _over_chunks(block, neighbors.shape[1] * k, q_pts, neighbors, gen_weights, own_kp)


__all__ = ['CHUNK_ELEMENTS', 'gather_rows', 'relative_positions', 'kp_influences', 'kpconv_export',
           'kp_aggregate_export']
