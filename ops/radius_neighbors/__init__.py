"""radius_neighbors: supports strictly inside a radius, nearest first, truncated to a limit H and
padded with the shadow index Ns (the KPConv convention), with the untruncated counts; and
calibrate_neighbor_limit, which picks H from observed counts (KPConv keeps 90 % of
neighbourhoods whole)."""
import math

import torch

from .. import _checks
from .._checks import OpTypeError, OpValueError


_OP = 'radius_neighbors'


@_checks.register_fake('fsdlite::radius_neighbors')
def _radius_neighbors_fake(query, support, radius, max_neighbors, query_batch=None, support_batch=None):
    return (query.new_empty((query.shape[0], max_neighbors), dtype=torch.long),
            query.new_empty((query.shape[0],), dtype=torch.long))


def radius_neighbors(query, support, radius, max_neighbors, query_batch=None, support_batch=None,
                     return_counts=False):
    """Neighbours of every query with squared distance ``< radius**2`` (strict), within its sample.

    Args:
        query (Tensor): (Nq, D) float32/float64 finite coordinates (KPConv: D = 3).
        support (Tensor): (Ns, D) same dtype and device.
        radius (float): finite, > 0. ``radius**2`` is rounded to the input dtype before the
            comparison, so a support at exactly the radius is never a neighbour.
        max_neighbors (int): H >= 1, columns of the result (see :func:`calibrate_neighbor_limit`).
        query_batch, support_batch (Tensor, optional): (Nq,), (Ns,) int64 sample ids sorted
            non-decreasing; both or neither.
        return_counts (bool): also return the untruncated neighbour count of every query.
    Returns:
        Tensor | tuple: ``index`` (Nq, H) int64 support rows sorted by distance (ties -> lower
        index), padded with the shadow index ``Ns``; with ``return_counts`` also ``counts``
        (Nq,) int64. Queries with ``counts > H`` lost their farthest neighbours: compare the
        counts with H to see how many neighbourhoods were truncated.
    """
    _checks.point_sets(_OP, query, support, query_batch, support_batch)
    radius = _checks.finite_positive(_OP, 'radius', radius)
    max_neighbors = _checks.positive_int(_OP, 'max_neighbors', max_neighbors)
    _checks.output_memory(_OP, 'max_neighbors', max_neighbors, query.shape[0], 'the queries, query.shape[0]', 8,
                          query.device)  # int64 index
    index, counts = torch.ops.fsdlite.radius_neighbors(query, support, radius, max_neighbors, query_batch,
                                                       support_batch)
    return (index, counts) if return_counts else index


def calibrate_neighbor_limit(counts, quantile=0.9):
    """The neighbour limit H that keeps a ``quantile`` of the neighbourhoods untruncated.

    Args:
        counts (Tensor | sequence of Tensor): untruncated neighbour counts (any shape, integer,
            >= 0), e.g. ``radius_neighbors(..., return_counts=True)[1]`` over a few batches.
        quantile (float): fraction in (0, 1] of neighbourhoods that must fit whole.
    Returns:
        int: the smallest H >= 1 such that at least ``quantile`` of the counts are <= H.
    """
    op = 'calibrate_neighbor_limit'
    if isinstance(counts, (list, tuple)):
        for i, c in enumerate(counts):
            _checks.tensor(op, f'counts[{i}]', c, dtypes=_checks.INDEX_DTYPES)
        counts = torch.cat([c.flatten().long() for c in counts]) if counts else torch.zeros(0, dtype=torch.long)
    _checks.tensor(op, 'counts', counts, dtypes=_checks.INDEX_DTYPES)
    try:
        q = float(quantile)
    except (TypeError, ValueError):
        raise OpTypeError(f'{op}: quantile must be a number, got {quantile!r}') from None
    if not 0 < q <= 1:
        raise OpValueError(f'{op}: quantile must lie in (0, 1], got {quantile!r}')
    values = counts.flatten()
    if values.numel() == 0:
        raise OpValueError(f'{op}: counts is empty; expected at least one neighbourhood count')
    if int(values.min()) < 0:
        raise OpValueError(f'{op}: counts must be >= 0, got {int(values.min())}')
    n = values.numel()
    kept = min(n, max(1, math.ceil(round(q * n, 6))))  # neighbourhoods that must stay whole
    return max(1, int(values.sort().values[kept - 1]))


__all__ = ['radius_neighbors', 'calibrate_neighbor_limit']
