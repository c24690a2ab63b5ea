"""Index helpers of the FSD pipeline.

The data-dependent ones (output size depends on values) are isolated here so a fixed-shape twin
can replace them: :func:`mask_to_index` (``nonzero``) and its static twin :func:`mask_to_padded_index`
(a cumulative sum and a scatter, export-safe).  The others keep their input's shape.
"""
import torch

from fsdlite.structures.bounds import check_bound


def mask_to_index(mask):
    """Indices (K,) int64 of the True entries of a 1-D bool mask (data-dependent K)."""
    if mask.dim() != 1 or mask.dtype != torch.bool:
        raise ValueError(f'mask_to_index: mask must be a 1-D bool tensor, got {mask.dtype} {tuple(mask.shape)}')
    return torch.nonzero(mask, as_tuple=False).squeeze(1)


def mask_to_padded_index(mask, bound, name=None, strict=None):
    """Fixed-shape :func:`mask_to_index`: the True positions in increasing order, padded to ``bound``.

    Args:
        mask (Tensor): (N,) bool.
        bound (int): M, the number of slots.
        name (str, optional): bound name; when given, more than M True entries raise
            :class:`~fsdlite.structures.bounds.BoundExceededError` in eager mode (see ``check_bound``).
        strict (bool, optional): passed to ``check_bound``.
    Returns:
        tuple: ``index`` (M,) int64 positions (N = dump for unused slots; True entries beyond M are dropped),
        ``num_valid`` () int64 (<= M) and ``num_dropped`` () int64.
    """
    if mask.dim() != 1 or mask.dtype != torch.bool:
        raise ValueError(f'mask_to_padded_index: mask must be a 1-D bool tensor, got {mask.dtype} {tuple(mask.shape)}')
    n, bound = mask.shape[0], int(bound)
    total = mask.long().sum()
    dropped = (check_bound(total, bound, name, strict=strict) if name is not None
               else (total - bound).clamp(min=0))
    pos = torch.cumsum(mask.long(), 0) - 1
    slot = torch.where(mask & (pos < bound), pos, torch.full_like(pos, bound))
    index = torch.full((bound + 1,), n, dtype=torch.long, device=mask.device).scatter(
        0, slot, torch.arange(n, device=mask.device))[:bound]
    return index, total.clamp(max=bound), dropped


def segment_rank(keys, scores, num_segments, counts=None):
    """Rank of each element inside its segment by descending score (ties: lower index first).

    Args:
        keys (Tensor): (N,) int64 segment id of each element in [0, num_segments).
        scores (Tensor): (N,) scores.
        num_segments (int): number of segments S.
        counts (Tensor, optional): (S,) :func:`segment_count` of ``keys``, when the caller has it already.
    Returns:
        Tensor: (N,) int64 rank (0 = best of its segment).
    """
    if keys.shape != scores.shape or keys.dim() != 1:
        raise ValueError(f'segment_rank: keys and scores must be (N,) tensors of one length, '
                         f'got {tuple(keys.shape)} and {tuple(scores.shape)}')
    n = keys.shape[0]
    if scores.dtype == torch.float32 and num_segments < 2**31:
        order = torch.sort(_segment_score_keys(keys, scores), stable=True).indices  # one sort
    else:
        order = torch.argsort(scores, descending=True, stable=True)
        order = order[torch.argsort(keys[order], stable=True)]
    if counts is None:
        counts = segment_count(keys, num_segments)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(keys)
    rank[order] = torch.arange(n, device=keys.device) - starts[keys[order]]
    return rank


def _segment_score_keys(keys, scores):
    """int64 ``segment * 2^32 + descending-score code`` of float32 ``scores``: ascending order of these keys is
    segment-major, score-descending (a stable sort keeps ties in index order, as NaN-free comparisons would)."""
    bits = (scores + 0.0).view(torch.int32).long()  # + 0.0 turns -0.0 into 0.0 (they compare equal)
    ordered = torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)  # monotonic in the float's value
    return keys * 2**32 + (2**31 - 1 - ordered)  # in [0, 2^32) per segment; larger scores first


def segment_count(index, num_segments):
    """Number of elements (S,) int64 of each segment of an (N,) index (values in [0, S))."""
    return torch.bincount(index, minlength=num_segments)[:num_segments]
