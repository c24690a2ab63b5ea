"""Pure-torch reference of knn (and the tiling helpers radius_neighbors' reference shares).

Brute force, tiled over query rows so memory stays bounded: each tile only looks at the support
window of the samples its queries belong to (batch ids are sorted), and squared distances are
accumulated over the dimensions in order 0..D-1, as the C++ kernels do, so results match exactly.
"""
import torch

TILE_ELEMENTS = 1 << 22  # distance-matrix entries per tile


def support_windows(query, support, query_batch, support_batch):
    """Per query row, the support rows ``[lo, hi)`` of its own sample (all rows when unbatched)."""
    nq, ns = query.shape[0], support.shape[0]
    if query_batch is None:
        return torch.zeros(nq, dtype=torch.long), torch.full((nq,), ns, dtype=torch.long)
    lo = torch.searchsorted(support_batch, query_batch, right=False)
    hi = torch.searchsorted(support_batch, query_batch, right=True)
    return lo.cpu(), hi.cpu()


def squared_distances(query, support):
    """(T, W) squared distances accumulated over the columns in order 0..D-1."""
    acc = torch.zeros(query.shape[0], support.shape[0], dtype=query.dtype, device=query.device)
    for d in range(query.shape[1]):
        diff = query[:, d, None] - support[None, :, d]
        acc = acc + diff * diff
    return acc


def sample_tiles(query, support, query_batch=None, support_batch=None, tile_elements=TILE_ELEMENTS):
    """Yield ``(row0, row1, col0, sqdist)`` over tiles of query rows.

    ``sqdist`` is (row1 - row0, W) for support rows ``col0 .. col0 + W``, +inf where the support
    belongs to another sample than the query.
    """
    lo, hi = support_windows(query, support, query_batch, support_batch)
    lo, hi = lo.tolist(), hi.tolist()
    nq, start = query.shape[0], 0
    while start < nq:
        rows = max(1, tile_elements // max(1, hi[start] - lo[start]))
        end = min(nq, start + rows)
        while end - start > 1 and (end - start) * (hi[end - 1] - lo[start]) > tile_elements:
            end = start + (end - start) // 2
        col0, col1 = lo[start], hi[end - 1]  # batch ids are sorted: windows grow monotonically
        dist = squared_distances(query[start:end], support[col0:col1])
        if query_batch is not None:
            other = query_batch[start:end, None] != support_batch[None, col0:col1]
            dist = dist.masked_fill(other, float('inf'))
        yield start, end, col0, dist
        start = end


def smallest_per_row(dist, limit, keep):
    """The ``limit`` smallest entries of each row among ``keep``, ordered by (value, column).

    Args:
        dist (Tensor): (T, W) values.
        limit (int): entries kept per row.
        keep (Tensor): (T, W) bool, entries allowed at all.
    Returns:
        tuple: rows, cols, values, rank (position within the row), each (P,).
    """
    if dist.shape[1] == 0:
        empty = torch.zeros(0, dtype=torch.long, device=dist.device)
        return empty, empty, dist.new_zeros(0), empty
    masked = dist.masked_fill(~keep, float('inf'))
    kth = masked.topk(min(limit, dist.shape[1]), dim=1, largest=False, sorted=True).values[:, -1:]
    rows, cols = (keep & (masked <= kth)).nonzero(as_tuple=True)  # row-major: columns ascending
    values = masked[rows, cols]
    order = torch.sort(values, stable=True).indices
    order = order[torch.sort(rows[order], stable=True).indices]  # lexicographic (row, value, column)
    rows, cols, values = rows[order], cols[order], values[order]
    starts = torch.searchsorted(rows, rows, right=False)
    rank = torch.arange(rows.shape[0], device=rows.device) - starts
    sel = rank < limit
    return rows[sel], cols[sel], values[sel], rank[sel]


def knn_reference(query, support, k, query_batch=None, support_batch=None, tile_elements=TILE_ELEMENTS):
    """Brute-force knn with the op's contract.

    Args:
        query (Tensor): (Nq, D) float.
        support (Tensor): (Ns, D) float.
        k (int): neighbours per query.
        query_batch, support_batch (Tensor, optional): (Nq,), (Ns,) sorted int64 sample ids.
    Returns:
        tuple: index (Nq, k) int64 (padding Ns) and sqdist (Nq, k) (padding +inf), ascending,
        ties -> lower support index.
    """
    nq, ns = query.shape[0], support.shape[0]
    index = torch.full((nq, k), ns, dtype=torch.long, device=query.device)
    sqdist = torch.full((nq, k), float('inf'), dtype=query.dtype, device=query.device)
    if ns == 0:
        return index, sqdist
    for row0, _, col0, dist in sample_tiles(query, support, query_batch, support_batch, tile_elements):
        rows, cols, values, rank = smallest_per_row(dist, k, torch.isfinite(dist))
        index[row0 + rows, rank] = col0 + cols
        sqdist[row0 + rows, rank] = values
    return index, sqdist


def knn_cdist_topk(query, support, k, tile_rows=1024):
    """Peer baseline for one sample: ``torch.cdist`` + ``topk``, tiled over query rows (ties unordered)."""
    parts_i, parts_d = [], []
    for start in range(0, query.shape[0], tile_rows):
        d = torch.cdist(query[start:start + tile_rows], support)
        vals, idx = d.topk(min(k, support.shape[0]), dim=1, largest=False)
        parts_i.append(idx)
        parts_d.append(vals * vals)
    return torch.cat(parts_i), torch.cat(parts_d)
