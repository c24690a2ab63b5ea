"""kpconv: fused kernel-point convolution (KPConv) with backward, CPU and CUDA.

``y[q] = sum_k (m[q, k] * sum_h infl[q, h, k] * x[nb[q, h]]) @ W[k]`` where the influences are
computed on the fly from the positions (see :func:`kpconv`).  Neither the (M, H, C1) gather nor
the (M, K, C1) correlation is kept for backward: queries are processed in bounded chunks and the
backward recomputes them.  Gradients flow to ``features``, ``weights``, ``kernel_points`` (shared
or per-query, for deformable KPConv) and ``modulations``; positions and indices get none.
"""
import torch

from .. import _checks
from ..build import load_family

load_family('kpconv')

INFLUENCES = ('constant', 'linear', 'gaussian')
AGGREGATIONS = ('sum', 'nearest')
_OP = 'kpconv'


def _grad_like(t, wanted):
    return t.new_empty(t.shape) if wanted else t.new_empty((0,))


@torch.library.register_fake('fsdlite::kpconv')
def _kpconv_fake(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations, sigma, influence,
                 aggregation):
    return features.new_empty((q_pts.shape[0], weights.shape[2]))


@torch.library.register_fake('fsdlite::kpconv_backward')
def _kpconv_backward_fake(grad_out, q_pts, s_pts, neighbors, features, kernel_points, weights, modulations,
                          sigma, influence, aggregation, output_mask):
    gm = _grad_like(modulations, output_mask[3]) if modulations is not None else features.new_empty((0,))
    return (_grad_like(features, output_mask[0]), _grad_like(kernel_points, output_mask[1]),
            _grad_like(weights, output_mask[2]), gm)


def _setup_context(ctx, inputs, output):
    q_pts, s_pts, neighbors, features, kernel_points, weights, modulations, sigma, influence, aggregation = inputs
    ctx.params = (sigma, influence, aggregation)
    ctx.has_mod = modulations is not None
    ctx.save_for_backward(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations)


def _backward(ctx, grad_out):
    q_pts, s_pts, neighbors, features, kernel_points, weights, modulations = ctx.saved_tensors
    need = ctx.needs_input_grad
    mask = [need[3], need[4], need[5], ctx.has_mod and need[6]]
    if not any(mask):
        return (None,) * 10
    gx, gkp, gw, gm = torch.ops.fsdlite.kpconv_backward(grad_out, q_pts, s_pts, neighbors, features, kernel_points,
                                                        weights, modulations, *ctx.params, mask)
    pick = [g if m else None for g, m in zip((gx, gkp, gw, gm), mask)]
    return None, None, None, pick[0], pick[1], pick[2], pick[3], None, None, None


torch.library.register_autograd('fsdlite::kpconv', _backward, setup_context=_setup_context)


def check_geometry(op, q_pts, s_pts, neighbors, kernel_points, features, sigma, influence, aggregation):
    """Validate the geometry arguments shared by the kernel-point ops; returns int64 ``neighbors``.

    Raises TypeError/ValueError naming the argument, its value and what was expected.
    """
    _checks.tensor(op, 'features', features, dtypes=(torch.float32, torch.float64), dim=2)
    dtype = features.dtype
    _checks.tensor(op, 'q_pts', q_pts, dtype=dtype, dim=2, size={1: (3, 'xyz')})
    _checks.tensor(op, 's_pts', s_pts, dtype=dtype, dim=2, size={1: (3, 'xyz'),
                                                                 0: (features.shape[0], 'features.shape[0]')})
    _checks.tensor(op, 'neighbors', neighbors, dtypes=_checks.INDEX_DTYPES, dim=2,
                   size={0: (q_pts.shape[0], 'q_pts.shape[0]')})
    _checks.tensor(op, 'kernel_points', kernel_points, dtype=dtype)
    if kernel_points.dim() not in (2, 3) or kernel_points.shape[-1] != 3 or kernel_points.shape[-2] < 1 or (
            kernel_points.dim() == 3 and kernel_points.shape[0] != q_pts.shape[0]):
        raise ValueError(f'{op}: kernel_points must be (K, 3) or (M={q_pts.shape[0]}, K, 3) with K >= 1, '
                         f'got shape {tuple(kernel_points.shape)}')
    _checks.same_device(op, features=features, q_pts=q_pts, s_pts=s_pts, neighbors=neighbors,
                        kernel_points=kernel_points)
    _checks.choice(op, 'influence', influence, INFLUENCES)
    _checks.choice(op, 'aggregation', aggregation, AGGREGATIONS)
    if influence != 'constant':
        _checks.finite_positive(op, 'sigma', sigma)
    _checks.index_range(op, 'neighbors (N = s_pts.shape[0] is the shadow neighbour)', neighbors, 0,
                        s_pts.shape[0] + 1)
    return neighbors.long()


def kpconv(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations=None, sigma=1.0,
           influence='linear', aggregation='sum'):
    """Fused kernel-point convolution.

    Args:
        q_pts (Tensor): (M, 3) query positions (float32/float64, same dtype as ``features``).
        s_pts (Tensor): (N, 3) support positions.
        neighbors (Tensor): (M, H) int64/int32 indices into the supports; ``N`` pads (shadow
            neighbour: zero feature, never influential).
        features (Tensor): (N, C1) support features.
        kernel_points (Tensor): (K, 3) kernel points shared by all queries, or (M, K, 3) per query
            (deformable KPConv), relative to the query.
        weights (Tensor): (K, C1, C2) kernel weights.
        modulations (Tensor, optional): (M, K) multipliers of each query's kernel points.
        sigma (float): influence extent (unused by 'constant').
        influence (str): 'constant', 'linear' max(0, 1 - d/sigma) or 'gaussian' exp(-d^2/(2(0.3 sigma)^2)).
        aggregation (str): 'sum' over kernel points or 'nearest' (each neighbour only influences its
            closest kernel point; first on ties).
    Returns:
        Tensor: (M, C2) output features.
    """
    neighbors = check_geometry(_OP, q_pts, s_pts, neighbors, kernel_points, features, sigma, influence,
                               aggregation)
    _checks.tensor(_OP, 'weights', weights, dtype=features.dtype, dim=3,
                   size={0: (kernel_points.shape[-2], 'K'), 1: (features.shape[1], 'features.shape[1]')})
    if modulations is not None:
        _checks.tensor(_OP, 'modulations', modulations, dtype=features.dtype, dim=2,
                       size={0: (q_pts.shape[0], 'M'), 1: (kernel_points.shape[-2], 'K')})
    _checks.same_device(_OP, features=features, weights=weights, modulations=modulations)
    return torch.ops.fsdlite.kpconv(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations,
                                    float(sigma), influence, aggregation)


__all__ = ['kpconv', 'INFLUENCES', 'AGGREGATIONS']
