"""Grouping of voted centres into instance clusters (FSD's cluster assigner, one pass for all classes).

Per class, voted centres are voxelized at a class-wise cluster voxel size; cells holding fewer than
``min_points`` centres are dropped (their points are counted in ``num_dropped``); the remaining cell
centres (mean of their voted centres) are linked by connected components with the class-wise
``connected_dist`` in the xy plane, within one sample and class.  Every point gets the cluster of
its cell.
"""
from typing import NamedTuple

import torch

from fsdlite.ops import connected_components, segment_reduce, voxelize

from ...registry import TASK_UTILS
from .indexing import mask_to_index


class Clusters(NamedTuple):
    """``point_cluster`` (P,) cluster of each foreground point (-1: dropped in a near-empty cell);
    ``num_clusters`` K (int); ``cluster_class`` (K,); ``cluster_batch`` (K,); ``num_dropped`` 0-d int64."""

    point_cluster: torch.Tensor
    num_clusters: int
    cluster_class: torch.Tensor
    cluster_batch: torch.Tensor
    num_dropped: torch.Tensor


def _class_table(name, values, num_classes, width):
    rows = [list(v) if isinstance(v, (list, tuple)) else [v] * width for v in values]
    if len(rows) != num_classes or any(len(r) != width for r in rows) or any(float(x) <= 0 for r in rows for x in r):
        raise ValueError(f'ClusterAssigner: {name} needs {num_classes} positive entries '
                         f'(each a number or {width} numbers), got {values}')
    return torch.tensor(rows, dtype=torch.float64)


@TASK_UTILS.register_module()
class ClusterAssigner:
    """Class-wise voxel grouping + connected components of voted centres.

    Args:
        num_classes (int): C.
        cluster_voxel_size (sequence): per class a cell size (number or (x, y, z)).
        connected_dist (sequence): per class the xy link distance (strictly below links).
        min_points (int): cells with fewer voted centres are dropped.
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

    def __call__(self, centre, class_id, batch):
        """Group voted centres.

        Args:
            centre (Tensor): (P, 3) voted centres inside ``point_range``.
            class_id (Tensor): (P,) int64 class of each centre.
            batch (Tensor): (P,) int64 sample id of each centre.
        Returns:
            Clusters
        """

        device = centre.device
        num_points = centre.shape[0]
        if num_points == 0:
            empty = torch.zeros(0, dtype=torch.int64, device=device)
            return Clusters(empty, 0, empty.clone(), empty.clone(), torch.zeros((), dtype=torch.int64, device=device))
        low = self.point_range[:3].to(device=device, dtype=centre.dtype)
        high = self.point_range[3:].to(device=device, dtype=centre.dtype)
        outside = ((centre < low) | (centre >= high)).any(dim=1)
        if bool(outside.any()):
            raise ValueError(f'ClusterAssigner: {int(outside.sum())} voted centres lie outside point_range '
                             f'{self.point_range.tolist()} (clamp them first, as ForegroundSampler does)')
        size = self.voxel_size.to(device=device, dtype=centre.dtype)[class_id]
        scaled = (centre.detach() - low) / size
        group = batch * self.num_classes + class_id
        vox = voxelize(scaled, [1.0, 1.0, 1.0], self.scaled_range, batch=group)
        cell = vox.point2voxel
        num_cells = vox.voxel_coors.shape[0]
        cell_group = vox.voxel_coors[:, 0]
        kept = mask_to_index(vox.voxel_counts >= self.min_points)
        cell_centre = segment_reduce(centre.detach(), cell, num_cells, 'mean')[kept]
        cell_class = cell_group[kept] % self.num_classes
        labels, num = connected_components(cell_centre, self.connected_dist.to(device=device, dtype=centre.dtype),
                                           batch=cell_group[kept] // self.num_classes, class_ids=cell_class,
                                           metric='xy')
        num = int(num)
        cell_cluster = torch.full((num_cells,), -1, dtype=torch.int64, device=device)
        cell_cluster[kept] = labels
        point_cluster = cell_cluster[cell]
        cluster_group = torch.zeros(num, dtype=torch.int64, device=device).scatter_(0, labels, cell_group[kept])
        return Clusters(point_cluster, num, cluster_group % self.num_classes, cluster_group // self.num_classes,
                        (point_cluster < 0).sum())
