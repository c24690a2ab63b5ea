"""Export-safe tensor helpers of the static (fixed-shape) path.

Pure torch with fixed output shapes: no ``torch.unique``, boolean-mask indexing, ``nonzero`` or Python
loops over samples, so they export to standard ONNX ops (opset >= 18: ScatterElements add/min/max, TopK,
CumSum, Gather, Where) and match their dynamic counterparts when bounds hold:

* :func:`static_segment_reduce` -- ``fsdlite.ops.segment_reduce`` (sum/mean/max/min, empty segment -> 0);
* :func:`static_unique` -- ``torch.unique`` in first-occurrence order, with inverse index and counts;
* :func:`static_voxelize` -- ``fsdlite.ops.voxelize`` (same voxel set, first-occurrence order);
* :func:`masked_topk` -- top-k budgets that replace data-dependent thresholds;
* :func:`gather_rows` -- row gathers through dump-slot indices.

Padding follows :mod:`fsdlite.structures.padded`: indices of padded/dropped rows point at a dump slot
(``M`` for an M-row buffer), never -1. Bounds follow :mod:`fsdlite.structures.bounds`: exceeding one raises
``BoundExceededError`` in eager mode; while exporting the result is truncated and the dropped count returned.
Eager-mode argument checks (index ranges, key ranges) are skipped while exporting.
"""
import warnings
from typing import NamedTuple

import torch

from fsdlite.structures.bounds import check_bound, is_exporting
from fsdlite.structures.padded import valid_mask, with_dump_row
from fsdlite.utils.constants import const

from .voxel_geometry import voxel_grid

REDUCTIONS = ('sum', 'mean', 'max', 'min')
_INT64_MAX = torch.iinfo(torch.int64).max
warnings.filterwarnings('ignore', message=r'index_reduce\(\) is in beta')  # stable since torch 2.0 in practice


def _extreme(dtype, reduce):
    """Identity of max/min in ``dtype`` (-inf/+inf, or the integer limits)."""
    if dtype.is_floating_point:
        return float('-inf') if reduce == 'max' else float('inf')
    info = torch.iinfo(dtype)
    return info.min if reduce == 'max' else info.max


def check_index(name, index, low, high):
    """Eager-mode check that every value of ``index`` lies in ``[low, high)`` (ValueError naming ``name``);
    skipped while exporting."""
    if index.numel() and not is_exporting():
        lo, hi = int(index.min()), int(index.max())
        if lo < low or hi >= high:
            raise ValueError(f'{name} contains {lo if lo < low else hi}, expected values in [{low}, {high})')


def static_segment_reduce(src, index, num_segments, reduce='sum', valid=None):
    """Segment reduction into a fixed number of segments with a dump slot.

    Args:
        src (Tensor): (N, *F) float or integer values.
        index (Tensor): (N,) int64 segment ids in ``[0, M]``; ``M = num_segments`` is the dump slot (discarded).
        num_segments (int): M (the segment bound).
        reduce (str): 'sum', 'mean', 'max' or 'min'.
        valid (Tensor, optional): (N,) bool; rows with False go to the dump slot.
    Returns:
        Tensor: (M, *F); empty segments are 0. Integer means use floor division. Unlike
        ``fsdlite.ops.segment_reduce`` (which skips NaN in max/min) NaN propagates.
    """
    if reduce not in REDUCTIONS:
        raise ValueError(f'static_segment_reduce: reduce must be one of {list(REDUCTIONS)}, got {reduce!r}')
    if src.dim() < 1 or index.shape != src.shape[:1]:
        raise ValueError(f'static_segment_reduce: index must have shape (N,) = ({src.shape[0] if src.dim() else "?"},) '
                         f'matching src {tuple(src.shape)}, got {tuple(index.shape)}')
    m = int(num_segments)
    check_index('static_segment_reduce: index', index, 0, m + 1)
    index = index.long()
    if valid is not None:
        index = torch.where(valid, index, torch.full_like(index, m))
    shape = (m + 1,) + tuple(src.shape[1:])
    # Row-wise index_add / index_reduce: ONNX ScatterND with one index per row (ORT copies whole rows; the
    # element-wise ScatterElements of scatter_add/scatter_reduce with an expanded index is far slower: see
    # docs/benchmarks.md, History).
    if reduce in ('sum', 'mean'):
        out = torch.zeros(shape, dtype=src.dtype, device=src.device).index_add(0, index, src)
    else:
        fill = _extreme(src.dtype, reduce)
        out = torch.full(shape, fill, dtype=src.dtype, device=src.device).index_reduce(
            0, index, src, 'amax' if reduce == 'max' else 'amin', include_self=True)
    count = torch.zeros(m + 1, dtype=torch.long, device=src.device).scatter_add(0, index, torch.ones_like(index))
    count = count.view(-1, *([1] * (src.dim() - 1)))
    if reduce == 'mean':
        denom = count.clamp(min=1)
        out = out / denom.to(src.dtype) if src.is_floating_point() else torch.div(out, denom, rounding_mode='floor')
    elif reduce in ('max', 'min'):
        out = torch.where(count > 0, out, torch.zeros_like(out))
    return out[:m]


class StaticUnique(NamedTuple):
    """Result of :func:`static_unique` (K = max_unique, N rows)."""
    keys: torch.Tensor         #: (K,) unique keys in first-occurrence order; padding 0
    inverse: torch.Tensor      #: (N,) int64 position of each row's key in ``keys``; K (dump) if invalid/dropped
    counts: torch.Tensor       #: (K,) int64 rows per unique key (0 for padding)
    first: torch.Tensor        #: (K,) int64 first row of each unique key; N for padding
    num_unique: torch.Tensor   #: () int64 unique keys kept (<= K)
    num_dropped: torch.Tensor  #: () int64 unique keys beyond K (their rows map to the dump)


def _group_ids(keys, valid, key_space):
    """Dense group id per row in ``[0, G)`` (G+1 = dump for invalid rows) and G."""
    n = keys.shape[0]
    if key_space is not None:
        return torch.where(valid, keys, torch.full_like(keys, key_space)), int(key_space)
    # Sort-based: ids of the distinct keys in key order (ties in any order: only the partition matters).
    masked = torch.where(valid, keys, torch.full_like(keys, _INT64_MAX))
    sorted_keys, order = torch.sort(masked)
    is_new = torch.ones_like(sorted_keys, dtype=torch.bool)
    if n > 1:
        is_new = torch.cat([is_new[:1], sorted_keys[1:] != sorted_keys[:-1]])
    gid_sorted = torch.cumsum(is_new.long(), 0) - 1
    gid = torch.zeros_like(gid_sorted).scatter(0, order, gid_sorted)
    return torch.where(valid, gid, torch.full_like(gid, n)), n


def static_unique(keys, valid, max_unique, key_space=None, strict=None, bound_name='max_unique'):
    """Unique keys in first-occurrence order with a fixed bound (export-safe ``torch.unique``).

    Two strategies with the same result: by default the keys are sorted (O(N) memory; ONNX TopK); with
    ``key_space=G`` (all valid keys in ``[0, G)``) a dense (G + 1)-slot table replaces the sort (ScatterElements
    min only, TensorRT-friendly; O(G) memory). First occurrences come from a scatter-min of row numbers, the
    order from a cumulative sum over rows (fsd.md section 5 item 5).

    Args:
        keys (Tensor): (N,) int64 keys (>= 0 with ``key_space``).
        valid (Tensor): (N,) bool rows taking part (padding rows False).
        max_unique (int): K, the bound on distinct keys.
        key_space (int, optional): G for the dense strategy.
        strict (bool, optional): raise ``BoundExceededError`` when more than K keys (default: eager mode).
        bound_name (str): name of the bound in that error.
    Returns:
        StaticUnique
    """
    if keys.dim() != 1 or valid.shape != keys.shape or valid.dtype != torch.bool:
        raise ValueError(f'static_unique: keys must be (N,) and valid (N,) bool, got keys {tuple(keys.shape)} and '
                         f'valid {tuple(valid.shape)} {valid.dtype}')
    n, k = keys.shape[0], int(max_unique)
    keys = keys.long()
    if key_space is not None and not is_exporting():
        check_index('static_unique: keys (valid rows)', torch.where(valid, keys, torch.zeros_like(keys)), 0,
                     int(key_space))
    gid, g = _group_ids(keys, valid, key_space)
    rows = torch.arange(n, device=keys.device)
    first_row = torch.full((g + 1,), n, dtype=torch.long, device=keys.device).scatter_reduce(
        0, gid, rows, 'amin', include_self=True)
    first_of = first_row.gather(0, gid)                              # first row of each row's key
    is_first = valid & (first_of == rows)
    rank = torch.cumsum(is_first.long(), 0) - 1                      # rank of each first row
    total = is_first.long().sum()
    dropped = check_bound(total, k, bound_name, strict=strict)
    inverse = rank.gather(0, first_of.clamp(max=max(n - 1, 0))) if n else rank
    inverse = torch.where(valid & (inverse < k), inverse, torch.full_like(inverse, k))
    slot = torch.where(is_first & (rank < k), rank, torch.full_like(rank, k))
    uniq = torch.zeros(k + 1, dtype=torch.long, device=keys.device).scatter(0, slot, keys)[:k]
    first = torch.full((k + 1,), n, dtype=torch.long, device=keys.device).scatter(0, slot, rows)[:k]
    counts = torch.zeros(k + 1, dtype=torch.long, device=keys.device).scatter_add(
        0, inverse, torch.ones_like(inverse))[:k]
    return StaticUnique(uniq, inverse, counts, first, total.clamp(max=k), dropped)


class StaticVoxelization(NamedTuple):
    """Result of :func:`static_voxelize` (V = max_voxels, N = padded points); all int64."""
    voxel_coors: torch.Tensor   #: (V, 4) [b, z, y, x] in first-occurrence order; padding rows 0
    point2voxel: torch.Tensor   #: (N,) voxel row of each point; V (dump) if padding/excluded/dropped
    voxel_counts: torch.Tensor  #: (V,) points per voxel
    first_point: torch.Tensor   #: (V,) first point of each voxel; N for padding rows
    num_voxels: torch.Tensor    #: () voxels kept (<= V)
    num_dropped: torch.Tensor   #: () voxels beyond V (their points map to the dump)
    num_excluded: torch.Tensor  #: () valid points outside point_range or with a NaN/Inf coordinate


def static_voxelize(points, num_valid, voxel_size, point_range, max_voxels, batch=None, batch_size=1,
                    dense_keys=False, strict=None, bound_name='max_voxels'):
    """Fixed-shape dynamic voxelization matching ``fsdlite.ops.voxelize`` (same voxels, same order).

    A point is inside iff ``0 <= floor((p - min) / size) < grid`` on x, y and z, computed in the points' dtype.

    Args:
        points (Tensor): (N, >=3) float32/float64, padded; rows ``< num_valid`` are points.
        num_valid (int | Tensor): number of valid rows (0-d tensor in graphs).
        voxel_size (Sequence[float]): (vx, vy, vz).
        point_range (Sequence[float]): (x_min, y_min, z_min, x_max, y_max, z_max).
        max_voxels (int): V, the voxel bound.
        batch (Tensor, optional): (N,) int64 sample ids in ``[0, batch_size)``.
        batch_size (int): B (used by ``dense_keys`` and its key range check).
        dense_keys (bool): use the dense key table of :func:`static_unique` (B * nz * ny * nx slots).
        strict (bool, optional): raise when more than V voxels (default: eager mode).
        bound_name (str): name of the bound in the overflow error.
    Returns:
        StaticVoxelization
    """
    voxel_size, point_range, (nz, ny, nx) = voxel_grid(voxel_size, point_range)
    if points.dim() != 2 or points.shape[1] < 3 or not points.is_floating_point():
        raise ValueError(f'static_voxelize: points must be a float (N, >=3) tensor, got {points.dtype} '
                         f'{tuple(points.shape)}')
    n = points.shape[0]
    valid = valid_mask(num_valid, n, points.device)
    lower = const([float(v) for v in point_range[:3]], points.dtype, points.device)
    size = const([float(v) for v in voxel_size], points.dtype, points.device)
    grid = const([int(nx), int(ny), int(nz)], points.dtype, points.device)
    q = torch.floor((points[:, :3] - lower) / size)                  # (N, 3) x, y, z; NaN stays NaN
    inside = valid & ((q >= 0) & (q < grid)).all(1)
    xyz = torch.where(inside.unsqueeze(1), q, torch.zeros_like(q)).long()
    if batch is None:
        b = torch.zeros(n, dtype=torch.long, device=points.device)
    else:
        b = batch.long()
        check_index('static_voxelize: batch (valid rows)', torch.where(valid, b, torch.zeros_like(b)), 0,
                     int(batch_size))
    keys = ((b * nz + xyz[:, 2]) * ny + xyz[:, 1]) * nx + xyz[:, 0]
    key_space = int(batch_size) * nz * ny * nx if dense_keys else None
    u = static_unique(keys, inside, max_voxels, key_space=key_space, strict=strict, bound_name=bound_name)
    k = u.keys
    coors = torch.stack([k // (nz * ny * nx), k // (ny * nx) % nz, k // nx % ny, k % nx], 1)
    excluded = (valid & ~inside).long().sum()
    return StaticVoxelization(coors, u.inverse, u.counts, u.first, u.num_unique, u.num_dropped, excluded)


class TopK(NamedTuple):
    """Result of :func:`masked_topk` (k selections along the last axis)."""
    values: torch.Tensor        #: (..., k) selected scores, descending; 0 where nothing was selected
    indices: torch.Tensor       #: (..., k) int64 positions; N (dump) where nothing was selected
    num_selected: torch.Tensor  #: (...) int64 number of real selections (<= k)


def _stable_topk(x, k, dim=-1):
    """``torch.topk`` with ties broken by the lower index (exportable: TopK, CumSum, k x k compares)."""
    n = x.shape[-1]
    if k == 0:
        return torch.topk(x, 0, dim=-1)
    kth = torch.topk(x, k, dim=-1).values[..., -1:]                  # the k-th value is unambiguous
    above, at = x > kth, x == kth
    need = k - above.long().sum(-1, keepdim=True)
    take = above | (at & (torch.cumsum(at.long(), -1) <= need))      # exactly k entries
    rows = torch.arange(n, device=x.device)
    pos = torch.topk(torch.where(take, n - rows, torch.zeros_like(rows)), k, dim=-1).indices  # index order
    val = x.gather(-1, pos)
    # rank by value (descending), equal values keep index order: a k x k comparison
    greater = val.unsqueeze(-2) > val.unsqueeze(-1)
    earlier = (val.unsqueeze(-2) == val.unsqueeze(-1)) & torch.ones(k, k, dtype=torch.bool, device=x.device).tril(-1)
    rank = (greater | earlier).long().sum(-1)
    return torch.zeros_like(val).scatter(-1, rank, val), torch.zeros_like(pos).scatter(-1, rank, pos)


def masked_topk(scores, k, valid=None, min_score=None, stable=False):
    """Top-k budget over the valid entries (scores >= ``min_score``) of the last axis.

    A fixed ``k`` replaces a data-dependent threshold count: the entries passing the mask compete for k slots;
    unused slots point at the dump index N.

    Args:
        scores (Tensor): (..., N) float scores (finite for valid entries).
        k (int): the budget (may exceed N: extra slots are unused).
        valid (Tensor, optional): (..., N) bool mask (e.g. padding).
        min_score (float, optional): entries below it are not selected.
        stable (bool): break ties by the lower index, as ONNX TopK does (``torch.topk``'s tie order is
            unspecified); costs a (k, k) comparison.
    Returns:
        TopK
    """
    k = int(k)
    if k < 0:
        raise ValueError(f'masked_topk: k must be >= 0, got {k}')
    n = scores.shape[-1]
    ok = torch.ones_like(scores, dtype=torch.bool) if valid is None else valid
    if min_score is not None:
        ok = ok & (scores >= min_score)
    masked = torch.where(ok, scores, torch.full_like(scores, float('-inf')))
    if k > n:  # pad with never-selected entries so that k slots exist
        pad_shape = tuple(scores.shape[:-1]) + (k - n,)
        masked = torch.cat([masked, masked.new_full(pad_shape, float('-inf'))], -1)
        ok = torch.cat([ok, ok.new_zeros(pad_shape)], -1)
    values, indices = (_stable_topk if stable else torch.topk)(masked, k, dim=-1)
    selected = ok.gather(-1, indices)
    indices = torch.where(selected, indices, torch.full_like(indices, n))
    values = torch.where(selected, values, torch.zeros_like(values))
    return TopK(values, indices, selected.long().sum(-1))


def gather_rows(src, index, fill=0.0):
    """Rows of ``src`` at ``index`` where ``index == M`` (the dump slot) reads a ``fill`` row.

    Args:
        src (Tensor): (M, *F).
        index (Tensor): integer indices of any shape with values in ``[0, M]``.
        fill: value of the dump row.
    Returns:
        Tensor: (*index.shape, *F).
    """
    check_index('gather_rows: index', index, 0, src.shape[0] + 1)
    rows = with_dump_row(src, fill).index_select(0, index.reshape(-1).long())  # ONNX Gather
    return rows.view(tuple(index.shape) + tuple(src.shape[1:]))


__all__ = ['REDUCTIONS', 'static_segment_reduce', 'StaticUnique', 'static_unique', 'StaticVoxelization',
           'static_voxelize', 'TopK', 'masked_topk', 'gather_rows']
