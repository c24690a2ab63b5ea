"""Pure-torch reference of radius_neighbors (brute force over sample tiles, shared with knn's reference)."""
import torch

from ..knn.reference import TILE_ELEMENTS, sample_tiles, smallest_per_row


def radius_neighbors_reference(query, support, radius, max_neighbors, query_batch=None, support_batch=None,
                               tile_elements=TILE_ELEMENTS):
    """Brute-force radius neighbours with the op's contract.

    Args:
        query (Tensor): (Nq, D) float; support (Tensor): (Ns, D) float.
        radius (float): neighbours satisfy ``sqdist < radius**2`` (compared in the input dtype).
        max_neighbors (int): H, columns kept.
        query_batch, support_batch (Tensor, optional): (Nq,), (Ns,) sorted int64 sample ids.
    Returns:
        tuple: index (Nq, H) int64 nearest first (ties -> lower index), padded with Ns, and
        counts (Nq,) int64 untruncated neighbour counts.
    """
    nq, ns = query.shape[0], support.shape[0]
    index = torch.full((nq, max_neighbors), ns, dtype=torch.long, device=query.device)
    counts = torch.zeros(nq, dtype=torch.long, device=query.device)
    if ns == 0:
        return index, counts
    radius_sq = radius * radius
    for row0, row1, col0, dist in sample_tiles(query, support, query_batch, support_batch, tile_elements):
        inside = dist < radius_sq
        counts[row0:row1] = inside.sum(1)
        rows, cols, _, rank = smallest_per_row(dist, max_neighbors, inside)
        index[row0 + rows, rank] = col0 + cols
    return index, counts
