"""Fixed-shape twin of :class:`~fsdlite.models.fsd.cluster_assigner.ClusterAssigner` (FSD-lite grouping).

Same cells and clusters as the dynamic assigner when bounds hold, with export-safe ops only:

1. voted centres are voxelized per (sample, class) with
   :func:`~fsdlite.models.layers.static_ops.static_voxelize` (same cells, same first-occurrence order);
2. every kept cell (>= ``min_points`` centres) looks up the cells of a fixed window of grid offsets through a
   dense key table (:class:`~fsdlite.models.fsd.graph_rulebook.GraphRulebookOps`); the window covers every cell
   whose mean centre can lie closer than the class's ``connected_dist`` in xy, so the links equal those of
   ``fsdlite.ops.connected_components``;
3. connected components by **min-label propagation** with hooking and two pointer jumps, a fixed number of
   iterations (bound ``max_cc_iters``).  In eager mode the labels are iterated to the fixed point and the number
   of iterations needed is checked against the bound (raises when exceeded); while exporting exactly
   ``max_cc_iters`` iterations run and the number of cells not yet converged is reported;
4. cluster ids by rank of each component's first cell (as the dynamic op numbers them), bound ``max_clusters``.
"""
import math
from typing import NamedTuple

import torch

from fsdlite.structures.bounds import check_bound, is_exporting
from fsdlite.structures.padded import valid_mask

from ..layers.static_ops import gather_rows, static_segment_reduce, static_voxelize
from ..layers.voxel_geometry import voxel_grid
from .graph_rulebook import GraphRulebookOps


class PaddedClusters(NamedTuple):
    """Clusters of P padded voted centres (K = ``max_clusters``).

    ``point_cluster`` (P,) cluster of each centre (K = dump: padding, near-empty cell, beyond the bound);
    ``cluster_class`` / ``cluster_batch`` (K,) (0 in padding); ``num_clusters`` () kept clusters;
    ``num_near_empty`` () centres in cells below ``min_points`` (the dynamic ``num_dropped``);
    ``dropped`` (2,) overflow of ``[max_clusters, max_cc_iters]`` (clusters beyond K; cells not converged).
    """

    point_cluster: torch.Tensor
    cluster_class: torch.Tensor
    cluster_batch: torch.Tensor
    num_clusters: torch.Tensor
    num_near_empty: torch.Tensor
    dropped: torch.Tensor


def link_window(assigner, num_z, device):
    """(W, 3) grid offsets ``(dz, dy, dx)`` of the cells that may link to a cell (all ``num_z`` layers: the
    metric is xy) and the window's half extent ``(hz, hy, hx)`` (Python ints).

    Two cell means ``d`` cells apart along x are more than ``(d - 1) * vx`` apart, so links need
    ``d <= ceil(connected_dist / vx)`` (largest over classes; the exact distance test follows).
    """
    sizes, dists = assigner.voxel_size.tolist(), assigner.connected_dist.tolist()  # Python numbers (graph constants)
    rx, ry = (max(int(math.ceil(d / size[axis])) for d, size in zip(dists, sizes)) for axis in (0, 1))
    axes = [torch.arange(-(num_z - 1), num_z, device=device), torch.arange(-ry, ry + 1, device=device),
            torch.arange(-rx, rx + 1, device=device)]
    return torch.stack(torch.meshgrid(*axes, indexing='ij'), -1).reshape(-1, 3), (num_z - 1, ry, rx)


def _propagate(label, nbr):
    """One min-label step: neighbour minimum, hook the current root, then two pointer jumps (dump = P).

    The (P, W) neighbour gather is the step's cost; a jump gathers P labels only, and the second one about halves
    the steps a KITTI frame needs (5 -> 3). Labels stay rows of the node's component, so the fixed point is the
    same.
    """
    p = label.shape[0]
    dump = torch.full((1,), p, dtype=label.dtype, device=label.device)
    ext = torch.cat([label, dump])
    low = torch.minimum(label, ext.index_select(0, nbr.reshape(-1)).view(nbr.shape).amin(1))
    ext = ext.scatter_reduce(0, label, low, 'amin', include_self=True)
    label = torch.minimum(ext[:p], low)
    for _ in range(2):
        label = torch.cat([label, dump]).index_select(0, label)
    return label


def connected_labels(label, nbr, iterations, strict=None, name='max_cc_iters'):
    """Component minimum of every node by min-label propagation over fixed neighbour lists.

    Args:
        label (Tensor): (P,) int64 initial labels: the node's own row, P for nodes outside the graph.
        nbr (Tensor): (P, W) int64 linked neighbour rows, P (dump) for none; links must be symmetric.
        iterations (int | None): fixed iteration count T; None runs to the fixed point (eager measurement).
        strict (bool, optional): raise when T iterations do not reach the fixed point (default: eager mode).
        name (str): bound name in the overflow error.
    Returns:
        tuple: labels (P,) (the smallest row of each component; P outside), iterations needed (int, eager) or
        None (exporting), and () int64 nodes whose label would still change after T steps (0 when converged).
    """
    strict = not is_exporting() if strict is None else strict
    if is_exporting() and iterations is not None:
        for _ in range(int(iterations)):
            label = _propagate(label, nbr)
        return label, None, (_propagate(label, nbr) != label).long().sum()
    start, needed = label, 0
    while True:  # eager: to the fixed point (at most P steps: each changing step lowers some label)
        nxt = _propagate(label, nbr)
        if torch.equal(nxt, label):
            break
        label, needed = nxt, needed + 1
    if iterations is None:
        return label, needed, torch.zeros((), dtype=torch.long, device=label.device)
    check_bound(needed, iterations, name, strict=strict)
    if needed > iterations:  # non-strict eager: the result an exported graph would give
        for _ in range(int(iterations)):
            start = _propagate(start, nbr)
        return start, needed, (_propagate(start, nbr) != start).long().sum()
    return label, needed, torch.zeros((), dtype=torch.long, device=label.device)


def group_padded(assigner, centre, class_id, batch, num_valid, batch_size, max_clusters, max_cc_iters,
                 strict=None, names=('max_clusters', 'max_cc_iters')):
    """Fixed-shape grouping of padded voted centres (see the module docstring).

    Args:
        assigner (ClusterAssigner): the model's assigner (cell sizes, link distances, min_points).
        centre (Tensor): (P, 3) voted centres inside the point range (rows ``< num_valid`` used).
        class_id, batch (Tensor): (P,) int64 class and sample of every centre.
        num_valid (Tensor | int): valid rows.
        batch_size (int): B.
        max_clusters (int): K.
        max_cc_iters (int | None): propagation iterations (None: to convergence, eager only).
        strict (bool, optional): raise on overflow (default: eager mode).
        names (tuple): bound names used in errors.
    Returns:
        tuple: :class:`PaddedClusters` and the iterations needed (int; None while exporting).
    """
    p, c, k = centre.shape[0], assigner.num_classes, int(max_clusters)
    device, dtype = centre.device, centre.dtype
    valid = valid_mask(num_valid, p, device)
    low = assigner.point_range[:3].to(device=device, dtype=dtype)
    size = assigner.voxel_size.to(device=device, dtype=dtype).index_select(0, class_id)
    scaled = (centre.detach() - low) / size
    group = batch * c + class_id
    cells = static_voxelize(scaled, num_valid, [1.0, 1.0, 1.0], assigner.scaled_range, p, batch=group,
                            batch_size=batch_size * c, dense_keys=True, strict=False)
    cell = cells.point2voxel                                                     # (P,) dump P
    kept = valid_mask(cells.num_voxels, p, device) & (cells.voxel_counts >= assigner.min_points)
    cell_centre = static_segment_reduce(centre.detach(), cell, p, 'mean')
    cell_group = cells.voxel_coors[:, 0]
    # links: kept cells of the window, closer than the class's distance in xy
    lookup = GraphRulebookOps(batch_size * c)
    shape = voxel_grid([1.0, 1.0, 1.0], assigner.scaled_range)[2]                 # (nz, ny, nx)
    window, halo = link_window(assigner, shape[0], device)
    nb = lookup.neighbour_rows(cells.voxel_coors, kept, shape, window, halo)      # (P, W), dump P
    dist2 = centre.new_zeros(nb.shape)  # squared xy distances, an axis at a time: a trailing axis of 2 is slow in ORT
    for axis in range(2):
        coord = cell_centre[:, axis].contiguous()
        delta = coord[:, None] - gather_rows(coord, nb)
        dist2 = dist2 + delta * delta
    dist = assigner.connected_dist.to(device=device, dtype=dtype).index_select(0, cell_group % c)
    link = kept[:, None] & (nb < p) & (dist2 < (dist * dist)[:, None])
    nbr = torch.where(link, nb, torch.full_like(nb, p))
    rows = torch.arange(p, device=device)
    label, needed, unconverged = connected_labels(torch.where(kept, rows, torch.full_like(rows, p)), nbr,
                                                  max_cc_iters, strict=strict, name=names[1])
    # cluster id = rank of the component's first cell (its label)
    is_root = kept & (label == rows)
    rank = torch.cumsum(is_root.long(), 0) - 1
    num = is_root.long().sum()
    over = check_bound(num, k, names[0], strict=strict)
    root_id = torch.where(is_root & (rank < k), rank, torch.full_like(rank, k))
    cell_cluster = gather_rows(root_id, label, fill=k)                          # label P (not kept) -> K
    point_cluster = gather_rows(cell_cluster, cell, fill=k)
    cluster_group = torch.zeros(k + 1, dtype=torch.long, device=device).scatter(0, root_id, cell_group)[:k]
    near_empty = (valid & ~gather_rows(kept, cell, fill=True)).long().sum()
    dropped = torch.stack([over.to(device), unconverged.to(device)])
    return PaddedClusters(point_cluster, cluster_group % c, cluster_group // c, num.clamp(max=k), near_empty,
                          dropped), needed


__all__ = ['PaddedClusters', 'link_window', 'connected_labels', 'group_padded']
