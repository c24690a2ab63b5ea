"""Index helpers of the FSD pipeline.

The data-dependent ones (output size depends on values) are isolated here so a fixed-shape twin
can replace them: :func:`mask_to_index` (``nonzero``).  The others keep their input's shape.
"""
import torch


def mask_to_index(mask):
    """Indices (K,) int64 of the True entries of a 1-D bool mask (data-dependent K)."""
    if mask.dim() != 1 or mask.dtype != torch.bool:
        raise ValueError(f'mask_to_index: mask must be a 1-D bool tensor, got {mask.dtype} {tuple(mask.shape)}')
    return torch.nonzero(mask, as_tuple=False).squeeze(1)


def segment_rank(keys, scores, num_segments):
    """Rank of each element inside its segment by descending score (ties: lower index first).

    Args:
        keys (Tensor): (N,) int64 segment id of each element in [0, num_segments).
        scores (Tensor): (N,) scores.
        num_segments (int): number of segments S.
    Returns:
        Tensor: (N,) int64 rank (0 = best of its segment).
    """
    if keys.shape != scores.shape or keys.dim() != 1:
        raise ValueError(f'segment_rank: keys and scores must be (N,) tensors of one length, '
                         f'got {tuple(keys.shape)} and {tuple(scores.shape)}')
    n = keys.shape[0]
    order = torch.argsort(scores, descending=True, stable=True)
    order = order[torch.argsort(keys[order], stable=True)]
    counts = torch.bincount(keys, minlength=num_segments)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(keys)
    rank[order] = torch.arange(n, device=keys.device) - starts[keys[order]]
    return rank


def segment_count(index, num_segments):
    """Number of elements (S,) int64 of each segment of an (N,) index (values in [0, S))."""
    return torch.bincount(index, minlength=num_segments)[:num_segments]
