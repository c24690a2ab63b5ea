"""Pure-torch reference of grid_subsample (torch.unique over cell keys), for tests and benchmarks."""
import torch


def cell_index(points, voxel_size, batch=None):
    """Cell of every point, cells numbered by first point; returns (cell (N,), first point (M,))."""
    n = points.shape[0]
    size = torch.as_tensor(voxel_size, dtype=torch.float64, device=points.device)
    keys = torch.floor(points.double() / size).long()
    sample = batch if batch is not None else torch.zeros(n, dtype=torch.long, device=points.device)
    _, inverse = torch.unique(torch.cat([sample[:, None], keys], 1), dim=0, return_inverse=True)
    m = int(inverse.max()) + 1 if n else 0
    rows = torch.arange(n, device=points.device)
    first = torch.full((m,), n, dtype=torch.long, device=points.device).scatter_reduce(0, inverse, rows, 'amin')
    order = torch.argsort(first)
    rank = torch.empty_like(order).scatter_(0, order, torch.arange(m, device=points.device))
    return rank[inverse], first[order]


def majority(labels, cell, num_cells):
    """Most frequent label per cell, ties -> smallest label."""
    pairs, counts = torch.unique(torch.stack([cell, labels], 1), dim=0, return_counts=True)
    best = torch.zeros(num_cells, dtype=torch.long, device=labels.device).scatter_reduce(
        0, pairs[:, 0], counts, 'amax', include_self=False)
    big = torch.iinfo(torch.long).max
    candidate = torch.where(counts == best[pairs[:, 0]], pairs[:, 1], torch.full_like(counts, big))
    return torch.full((num_cells,), big, dtype=torch.long, device=labels.device).scatter_reduce(
        0, pairs[:, 0], candidate, 'amin')


def grid_subsample_reference(points, voxel_size, batch=None, features=None, labels=None):
    """Reference with the op's contract; returns (points, batch, features, labels, cell).

    ``voxel_size`` is a 3-sequence; cell keys are ``floor(p / voxel_size)`` computed in float64;
    means accumulate in float64 (in point order) and are cast back to the input dtype.
    """
    cell, first = cell_index(points, voxel_size, batch)
    m = first.shape[0]
    counts = torch.bincount(cell, minlength=m).double()[:, None]

    def mean(src):
        sums = torch.zeros(m, src.shape[1], dtype=torch.float64, device=src.device).index_add_(0, cell, src.double())
        return (sums / counts).to(src.dtype)

    out_batch = batch[first] if batch is not None else torch.zeros(m, dtype=torch.long, device=points.device)
    return (mean(points), out_batch, None if features is None else mean(features),
            None if labels is None else majority(labels, cell, m), cell)
