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
