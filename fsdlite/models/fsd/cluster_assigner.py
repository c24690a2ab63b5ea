"""Grouping of voted centres into instance clusters (FSD's cluster assigner), one algorithm for both runs.

Per (sample, class), voted centres are voxelized at a class-wise cell size; cells holding fewer than
``min_points`` centres are left out (their centres counted in ``num_near_empty``); the remaining cells' centres
(mean voted centre) are linked when closer than the class's ``connected_dist`` in the xy plane, and the connected
components of the links are the clusters, numbered by their first cell.  Every centre gets its cell's cluster.

The call picks the backend of the cells and of the components, as the sparse convolution picks one by its map:

* **exact** (no ``bounds``; training and dynamic inference): ``fsdlite.ops.voxelize`` and
  ``fsdlite.ops.connected_components`` (fused CPU/CUDA kernels) on the valid centres;
* **bounded** (``bounds=(max_clusters, max_cc_iters)``; the fixed-shape run, exportable): padded centres, the
  cells by :func:`~fsdlite.models.layers.static_ops.static_voxelize`, the links through a dense key table over a
  fixed window of cells (:func:`link_window`; it covers every cell whose mean can lie closer than the class's
  distance, so the links are the exact ones), the components by **min-label propagation** with hooking and two
  pointer jumps (:func:`connected_labels`): in eager mode to the fixed point (the steps needed checked against
  ``max_cc_iters``), while exporting exactly ``max_cc_iters`` steps with the cells not yet converged reported.

Both give :class:`Clusters` with ``K`` cluster slots and slot ``K`` as the dump; when the bounds hold they give the
same clusters with the same numbering (tests/models/fsd/test_static_components.py).
"""
import math
from typing import NamedTuple, Optional

import torch

from fsdlite.ops import GraphRulebookOps, connected_components, segment_reduce, voxelize
from fsdlite.structures.bounds import check_bound, is_exporting
from fsdlite.structures.padded import valid_mask, with_dump_row

from ...registry import TASK_UTILS
from ..layers.static_ops import gather_rows, static_segment_reduce, static_voxelize
from ..layers.voxel_geometry import voxel_grid
from .indexing import mask_to_index


class Clusters(NamedTuple):
    """Clusters of P voted centres in K slots.

    ``point_cluster`` (P,) int64 cluster of each centre, K (the dump) for a centre in a near-empty cell, a padding
    row or a cluster beyond ``max_clusters``; ``num_clusters`` the clusters found (exact: an int, = K; bounded:
    () int64, at most K); ``cluster_class`` / ``cluster_batch`` (K,) int64; ``num_near_empty`` () int64 centres in
    cells below ``min_points``; ``dropped`` (2,) int64 overflow of ``[max_clusters, max_cc_iters]`` (clusters beyond
    K; cells not converged; zeros when exact); ``cc_iters`` propagation steps needed (bounded, eager) or None.
    """

    point_cluster: torch.Tensor
    num_clusters: object
    cluster_class: torch.Tensor
    cluster_batch: torch.Tensor
    num_near_empty: torch.Tensor
    dropped: torch.Tensor
    cc_iters: Optional[int] = None

    @property
    def capacity(self):
        """K, the cluster slots (the dump slot's index)."""
        return self.cluster_class.shape[0]


def _class_table(name, values, num_classes, width):
    rows = [list(v) if isinstance(v, (list, tuple)) else [v] * width for v in values]
    if len(rows) != num_classes or any(len(r) != width for r in rows) or any(float(x) <= 0 for r in rows for x in r):
        raise ValueError(f'ClusterAssigner: {name} needs {num_classes} positive entries '
                         f'(each a number or {width} numbers), got {values}')
    return torch.tensor(rows, dtype=torch.float64)


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


@TASK_UTILS.register_module()
class ClusterAssigner:
    """Class-wise voxel grouping + connected components of voted centres (see the module docstring).

    Args:
        num_classes (int): C.
        cluster_voxel_size (sequence): per class a cell size (number or (x, y, z)).
        connected_dist (sequence): per class the xy link distance (strictly below links).
        min_points (int): cells with fewer voted centres are left out.
        point_range (sequence): [x0, y0, z0, x1, y1, z1] containing all voted centres.
    """

    def __init__(self, num_classes, cluster_voxel_size=((0.3, 0.3, 6.0), (0.05, 0.05, 6.0), (0.2, 0.2, 6.0)),
                 connected_dist=(0.6, 0.1, 0.4), min_points=2, point_range=(0, -40, -3, 70.4, 40, 1)):
        self.num_classes = int(num_classes)
        self.voxel_size = _class_table('cluster_voxel_size', cluster_voxel_size, self.num_classes, 3)
        self.connected_dist = _class_table('connected_dist', connected_dist, self.num_classes, 1)[:, 0]
        if int(min_points) < 1:
            raise ValueError(f'ClusterAssigner: min_points must be >= 1, got {min_points}')
        self.min_points = int(min_points)
        if len(point_range) != 6 or not all(point_range[i] < point_range[i + 3] for i in range(3)):
            raise ValueError(f'ClusterAssigner: point_range must be [x0, y0, z0, x1, y1, z1] with min < max, '
                             f'got {point_range}')
        self.point_range = torch.tensor(point_range, dtype=torch.float64)
        # cells in units of each class's voxel size: one grid of the largest extent serves all classes
        extent = (self.point_range[3:] - self.point_range[:3]) / self.voxel_size
        self.scaled_range = [0.0, 0.0, 0.0] + torch.ceil(extent.max(dim=0).values).tolist()

    def __call__(self, centre, class_id, batch, batch_size=1, num_valid=None, bounds=None, strict=None):
        """Group voted centres.

        Args:
            centre (Tensor): (P, 3) voted centres inside ``point_range`` (bounded: rows ``< num_valid``).
            class_id (Tensor): (P,) int64 class of each centre.
            batch (Tensor): (P,) int64 sample id of each centre, in ``[0, batch_size)``.
            batch_size (int): B (the bounded backend's key table spans it).
            num_valid (Tensor | int, optional): bounded: valid rows (default P).
            bounds (tuple, optional): ``(max_clusters, max_cc_iters)`` -> the bounded backend (``max_cc_iters``
                None: propagate to the fixed point, eager only); None -> the exact backend.
            strict (bool, optional): bounded: raise on overflow (default: eager mode).
        Returns:
            Clusters
        """
        device, dtype, c = centre.device, centre.dtype, self.num_classes
        low = self.point_range[:3].to(device=device, dtype=dtype)
        if bounds is None:
            outside = ((centre < low) | (centre >= self.point_range[3:].to(device=device, dtype=dtype))).any(dim=1)
            if bool(outside.any()):
                raise ValueError(f'ClusterAssigner: {int(outside.sum())} voted centres lie outside point_range '
                                 f'{self.point_range.tolist()} (clamp them first, as ForegroundSampler does)')
        size = self.voxel_size.to(device=device, dtype=dtype).index_select(0, class_id)
        scaled = (centre.detach() - low) / size
        group = batch * c + class_id
        if bounds is None:
            if not centre.shape[0]:
                empty = torch.zeros(0, dtype=torch.long, device=device)
                zero = torch.zeros((), dtype=torch.long, device=device)
                return Clusters(empty, 0, empty, empty, zero, torch.zeros(2, dtype=torch.long, device=device))
            valid = None  # every row is a centre
            cell, cell_coors, kept, cell_centre = self._exact_cells(centre, scaled, group)
            cell_cluster, num, dropped, needed = self._exact_components(cell_coors, kept, cell_centre)
        else:
            num_valid = centre.shape[0] if num_valid is None else num_valid
            valid = valid_mask(num_valid, centre.shape[0], device)
            cell, cell_coors, kept, cell_centre = self._bounded_cells(centre, scaled, group, num_valid, batch_size)
            cell_cluster, num, dropped, needed = self._bounded_components(cell_coors, kept, cell_centre, batch_size,
                                                                          bounds, strict)
        # every centre gets its cell's cluster (K: near-empty cell, padding, beyond the bound); slot K takes the rest
        k = int(num) if bounds is None else int(bounds[0])
        point_cluster = with_dump_row(cell_cluster, k).index_select(0, cell)
        cluster_group = torch.zeros(k + 1, dtype=torch.long, device=device).scatter(0, cell_cluster,
                                                                                    cell_coors[:, 0])[:k]
        in_kept_cell = with_dump_row(kept, True).index_select(0, cell)
        near_empty = (~in_kept_cell if valid is None else valid & ~in_kept_cell).long().sum()
        return Clusters(point_cluster, num, cluster_group % c, cluster_group // c, near_empty, dropped, needed)

    def _exact_cells(self, centre, scaled, group):
        """Cells by ``fsdlite.ops.voxelize``: each centre's cell (P,), the cells' ``[sample * C + class, z, y, x]``
        (V, 4), the kept cells (V,) bool and the cells' mean centres (V, 3)."""
        vox = voxelize(scaled, [1.0, 1.0, 1.0], self.scaled_range, batch=group)
        num_cells = vox.voxel_coors.shape[0]
        cell_centre = segment_reduce(centre.detach(), vox.point2voxel, num_cells, 'mean')
        return vox.point2voxel, vox.voxel_coors, vox.voxel_counts >= self.min_points, cell_centre

    def _exact_components(self, cell_coors, kept, cell_centre):
        """``fsdlite.ops.connected_components`` of the kept cells -> cluster per cell (V,) (K = dump), K (int),
        zero overflow, None."""
        index = mask_to_index(kept)
        c, device = self.num_classes, cell_centre.device
        group = cell_coors[:, 0].index_select(0, index)
        labels, num = connected_components(cell_centre.index_select(0, index),
                                           self.connected_dist.to(device=device, dtype=cell_centre.dtype),
                                           batch=group // c, class_ids=group % c, metric='xy')
        num = int(num)
        cell_cluster = torch.full((kept.shape[0],), num, dtype=torch.long, device=device).scatter(0, index, labels)
        return cell_cluster, num, torch.zeros(2, dtype=torch.long, device=device), None

    def _bounded_cells(self, centre, scaled, group, num_valid, batch_size):
        """Cells of the padded centres by ``static_voxelize`` (P slots): each centre's cell (P,) (dump P), the
        cells' ``[sample * C + class, z, y, x]`` (P, 4), the kept cells (P,) bool and their mean centres (P, 3)."""
        p = centre.shape[0]
        cells = static_voxelize(scaled, num_valid, [1.0, 1.0, 1.0], self.scaled_range, p, batch=group,
                                batch_size=batch_size * self.num_classes, dense_keys=True, strict=False)
        kept = valid_mask(cells.num_voxels, p, centre.device) & (cells.voxel_counts >= self.min_points)
        cell_centre = static_segment_reduce(centre.detach(), cells.point2voxel, p, 'mean')
        return cells.point2voxel, cells.voxel_coors, kept, cell_centre

    def _bounded_components(self, cell_coors, kept, cell_centre, batch_size, bounds, strict):
        """Links of the kept padded cells through the key table, min-label propagation, cluster id = rank of the
        component's first cell -> cluster per cell (P,) (K = dump), clusters () int64 (at most K), overflow (2,),
        steps needed."""
        (max_clusters, max_iters), c = bounds, self.num_classes
        p, k, device, dtype = kept.shape[0], int(max_clusters), cell_centre.device, cell_centre.dtype
        lookup = GraphRulebookOps(batch_size * c)
        shape = voxel_grid([1.0, 1.0, 1.0], self.scaled_range)[2]                    # (nz, ny, nx)
        window, halo = link_window(self, shape[0], device)
        nb = lookup.neighbour_rows(cell_coors, kept, shape, window, halo)           # (P, W), dump P
        dist2 = cell_centre.new_zeros(nb.shape)  # squared xy distances an axis at a time (a trailing 2 is slow in ORT)
        for axis in range(2):
            coord = cell_centre[:, axis].contiguous()
            delta = coord[:, None] - gather_rows(coord, nb)
            dist2 = dist2 + delta * delta
        dist = self.connected_dist.to(device=device, dtype=dtype).index_select(0, cell_coors[:, 0] % c)
        link = kept[:, None] & (nb < p) & (dist2 < (dist * dist)[:, None])
        nbr = torch.where(link, nb, torch.full_like(nb, p))
        rows = torch.arange(p, device=device)
        label, needed, unconverged = connected_labels(torch.where(kept, rows, torch.full_like(rows, p)), nbr,
                                                      max_iters, strict=strict)
        is_root = kept & (label == rows)
        rank = torch.cumsum(is_root.long(), 0) - 1
        num = is_root.long().sum()
        over = check_bound(num, k, 'max_clusters', strict=strict)
        root_id = torch.where(is_root & (rank < k), rank, torch.full_like(rank, k))
        cell_cluster = gather_rows(root_id, label, fill=k)                          # label P (not kept) -> K
        return cell_cluster, num.clamp(max=k), torch.stack([over.to(device), unconverged.to(device)]), needed


__all__ = ['Clusters', 'ClusterAssigner', 'link_window', 'connected_labels']
