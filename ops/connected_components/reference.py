"""Pure-torch reference of connected_components, for tests and benchmarks.

Edges come from a sweep.  Points are binned into x-strips of width (just over) the threshold;
each point enters the sweep as itself and as a copy assigned to the previous strip.  Entries are
sorted by (group, strip, y) with group = (sample, class): a linked pair lies in the same or in
adjacent strips, so it meets as (original, original) or (original, copy) entries of one strip
whose y gap is below the threshold, and the entries between them share that strip.  Offsets k
of the sorted order are swept until no entry pair at offset k shares a strip with a y gap below
the threshold.  Candidates are tested exactly (float64 squared distance < threshold^2).
Components come from min-label propagation with pointer jumping until a fixed point.
Memory is O(N + number of linked pairs).
"""
import torch


def canonical_labels(component):
    """Relabel arbitrary component ids (N,) int64 to 0..K-1 in order of each component's first point.

    Returns:
        (Tensor, int): (N,) int64 labels and K.
    """
    n = component.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.long, device=component.device), 0
    _, comp = torch.unique(component, return_inverse=True)
    first = torch.full((n,), n, dtype=torch.long, device=comp.device)
    first = first.scatter_reduce(0, comp, torch.arange(n, device=comp.device), 'amin')
    first_of_point = first[comp]
    is_first = first_of_point == torch.arange(n, device=comp.device)
    rank = torch.cumsum(is_first.long(), 0) - 1
    return rank[first_of_point], int(is_first.sum())


def linked_pairs_reference(points, threshold, batch=None, class_ids=None, metric='xy'):
    """Every linked pair of points (at least once), as original indices.

    Args mirror :func:`connected_components_reference`.
    Returns:
        (Tensor, Tensor): (E,) int64 endpoints ``src``, ``dst``.
    """
    dims = 2 if metric == 'xy' else 3
    p = points[:, :dims].double()
    n = p.shape[0]
    zeros = torch.zeros(n, dtype=torch.long, device=p.device)
    batch = zeros if batch is None else batch.long()
    classes = zeros if class_ids is None else class_ids.long()
    if isinstance(threshold, torch.Tensor) and threshold.dim() == 1:
        t = threshold.double().to(p.device)[classes]
    else:
        t = torch.full((n,), float(threshold), dtype=torch.float64, device=p.device)
    _, group = torch.unique(torch.stack([batch, classes], 1), dim=0, return_inverse=True) if n else (None, zeros)
    strip = torch.floor(p[:, 0] / torch.where(t > 0, t * (1 + 1e-9), 1.0)).long()
    idx = torch.arange(n, device=p.device)
    ent_idx = torch.cat([idx, idx])  # originals, then copies in the previous strip
    ent_strip = torch.cat([strip, strip - 1])
    ent_copy = torch.cat([torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool)]).to(p.device)
    order = torch.argsort(p[ent_idx, 1], stable=True)
    order = order[torch.argsort(ent_strip[order], stable=True)]
    order = order[torch.argsort(group[ent_idx][order], stable=True)]
    e_idx, e_strip, e_copy = ent_idx[order], ent_strip[order], ent_copy[order]
    e_group, e_y, e_t = group[e_idx], p[e_idx, 1], t[e_idx]
    src, dst = [], []
    for k in range(1, 2 * n):
        cand = (e_group[k:] == e_group[:-k]) & (e_strip[k:] == e_strip[:-k]) & ((e_y[k:] - e_y[:-k]) < e_t[:-k])
        if not bool(cand.any()):
            break
        cand &= ~(e_copy[k:] & e_copy[:-k])
        i, j = e_idx[:-k][cand], e_idx[k:][cand]
        d2 = ((p[i] - p[j]) ** 2).sum(1)
        link = d2 < t[i] ** 2
        src.append(i[link])
        dst.append(j[link])
    empty = torch.zeros(0, dtype=torch.long, device=p.device)
    return (torch.cat(src) if src else empty), (torch.cat(dst) if dst else empty)


def components_from_edges(n, src, dst):
    """Component labels (ordered by first point) of an undirected graph on n nodes: ((N,) int64, K)."""
    label = torch.arange(n, device=src.device)
    while True:
        low = torch.minimum(label[src], label[dst])
        new = label.scatter_reduce(0, src, low, 'amin').scatter_reduce(0, dst, low, 'amin')
        new = new[new]
        if torch.equal(new, label):
            break
        label = new
    return canonical_labels(label)


def connected_components_reference(points, threshold, batch=None, class_ids=None, metric='xy'):
    """Connected components of points linked when closer than ``threshold`` (strictly).

    Args:
        points (Tensor): (N, >=2 or 3) float coordinates.
        threshold (float | Tensor): scalar, or (C,) per-class thresholds indexed by ``class_ids``.
        batch (Tensor, optional): (N,) sample ids; points of different samples never link.
        class_ids (Tensor, optional): (N,) class ids; points of different classes never link.
        metric (str): 'xy' or 'xyz'.
    Returns:
        (Tensor, int): (N,) int64 labels 0..K-1 ordered by first point, and K.
    """
    src, dst = linked_pairs_reference(points, threshold, batch, class_ids, metric)
    return components_from_edges(points.shape[0], src, dst)
