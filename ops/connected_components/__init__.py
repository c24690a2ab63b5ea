"""connected_components: Euclidean-threshold clustering of points (FSD's grouping of voted centres).

Two points are linked iff their distance (xy or xyz) is **strictly** below the threshold and
they share the sample (``batch``) and, when given, the class (``class_ids``); components are
the transitive closure.  Grid hashing + union-find: memory O(N), never an N x N matrix.
Distances are compared in float64 (|p - q|^2 < t^2) whatever the input dtype.
"""
import numbers

import torch

from .. import _checks
from .._checks import OpTypeError, OpValueError


_OP = 'connected_components'
METRICS = {'xy': 2, 'xyz': 3}


@_checks.register_fake('fsdlite::connected_components', any_device=('threshold',))
def _connected_components_fake(points, threshold, batch, class_ids, ndim, per_class):
    return points.new_empty((points.shape[0],), dtype=torch.long), points.new_empty((), dtype=torch.long)


def _thresholds(threshold, device):
    """-> ((C,) float64 tensor, per_class)."""
    if isinstance(threshold, torch.Tensor):
        _checks.tensor(_OP, 'threshold', threshold, floating=True)
        if threshold.dim() > 1:
            raise OpValueError(f'{_OP}: threshold must be a scalar or a (C,) per-class tensor, got shape '
                               f'{tuple(threshold.shape)}')
        per_class = threshold.dim() == 1
        values = threshold.detach().reshape(-1).double().cpu().tolist()
    elif isinstance(threshold, (list, tuple)):
        per_class, values = True, list(threshold)
    elif isinstance(threshold, numbers.Real) and not isinstance(threshold, bool):
        per_class, values = False, [threshold]
    else:
        raise OpTypeError(f'{_OP}: threshold must be a number or a (C,) tensor, got {type(threshold).__name__}')
    if per_class and not values:
        raise OpValueError(f'{_OP}: a per-class threshold needs at least one class, got {threshold!r}')
    values = _checks.finite_positive(_OP, 'threshold', values, allow_zero=True)
    return torch.tensor(values, dtype=torch.float64, device=device), per_class


def _ids(name, value, n):
    if value is None:
        return None
    _checks.tensor(_OP, name, value, dtypes=_checks.INDEX_DTYPES, dim=1, size={0: (n, 'points.shape[0]')})
    return value.long()


def connected_components(points, threshold, batch=None, class_ids=None, metric='xy'):
    """Label the connected components of the "closer than threshold" graph.

    Args:
        points (Tensor): (N, >=2) ('xy') or (N, >=3) ('xyz') floating coordinates; extra columns ignored.
        threshold (float | Tensor | list): scalar distance, or (C,) per-class distances (needs
            ``class_ids`` in [0, C)); >= 0 (0 links nothing).
        batch (Tensor, optional): (N,) int64 sample id of every point.
        class_ids (Tensor, optional): (N,) int64 class id of every point.
        metric (str): 'xy' (BEV distance, as FSD) or 'xyz'.
    Returns:
        (Tensor, int): labels (N,) int64 in 0..K-1, numbered in order of each component's first
        point, and K.
    """
    ndim = METRICS[_checks.choice(_OP, 'metric', metric, tuple(METRICS))]
    _checks.tensor(_OP, 'points', points, floating=True, dim=2)
    _checks.min_size(_OP, 'points', points, 1, ndim, f'coordinates for metric {metric!r}')
    n = points.shape[0]
    batch = _ids('batch', batch, n)
    class_ids = _ids('class_ids', class_ids, n)
    _checks.same_device(_OP, points=points, batch=batch, class_ids=class_ids)
    if isinstance(threshold, torch.Tensor) and threshold.is_meta:  # any real device is fine: values are read
        _checks.same_device(_OP, points=points, threshold=threshold)
    thresholds, per_class = _thresholds(threshold, points.device)
    if per_class and class_ids is None:
        raise OpValueError(f'{_OP}: a per-class threshold (C={len(thresholds)}) needs class_ids')
    # values (class_ids in range, finite coordinates, thresholds not too small for them): checked in C++, once
    with torch.no_grad():
        labels, num = torch.ops.fsdlite.connected_components(points, thresholds, batch, class_ids, ndim, per_class)
    return labels, int(num)


__all__ = ['connected_components']
