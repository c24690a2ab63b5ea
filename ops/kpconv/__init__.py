"""kpconv: fused kernel-point convolution (KPConv) with backward, CPU and CUDA.

``y[q] = sum_k (m[q, k] * sum_h infl[q, h, k] * x[nb[q, h]]) @ W[k]`` where the influences are
computed on the fly from the positions (see :func:`kpconv`).  Neither the (M, H, C1) gather nor
the (M, K, C1) correlation is kept for backward: queries are processed in bounded chunks and the
backward recomputes them.  Gradients flow to ``features``, ``weights``, ``kernel_points`` (shared
or per-query, for deformable KPConv) and ``modulations``; positions and indices get none.
"""
import torch

from .. import _checks
from .._checks import OpValueError
from ._glue import register_kp_autograd


INFLUENCES = ('constant', 'linear', 'gaussian')
AGGREGATIONS = ('sum', 'nearest')
_OP = 'kpconv'


@_checks.register_fake('fsdlite::kpconv')
def _kpconv_fake(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations, sigma, influence,
                 aggregation):
    return features.new_empty((q_pts.shape[0], weights.shape[2]))


# Gradients flow to features, kernel_points, weights and modulations (inputs 3, 4, 5, 6).
register_kp_autograd(_OP, (3, 4, 5, 6))


def check_geometry(op, q_pts, s_pts, neighbors, kernel_points, features, sigma, influence, aggregation):
    """Validate the geometry arguments shared by the kernel-point ops; returns int64 ``neighbors``.

    Raises OpTypeError/OpValueError naming the argument, its value and what was expected. The values (finite
    positions, neighbour indices in range) are checked by the C++ op, once (``kp_primitives.h``).
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
        raise OpValueError(f'{op}: kernel_points must be (K, 3) or (M={q_pts.shape[0]}, K, 3) with K >= 1, '
                           f'got shape {tuple(kernel_points.shape)}')
    _checks.same_device(op, features=features, q_pts=q_pts, s_pts=s_pts, neighbors=neighbors,
                        kernel_points=kernel_points)
    _checks.choice(op, 'influence', influence, INFLUENCES)
    _checks.choice(op, 'aggregation', aggregation, AGGREGATIONS)
    if influence != 'constant':
        _checks.finite_positive(op, 'sigma', sigma)
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
