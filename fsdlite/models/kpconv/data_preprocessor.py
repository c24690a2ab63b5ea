"""Batching of point clouds with KPConv's multi-scale neighbourhoods (built with fsdlite.ops).

Level 0 = grid subsampling of the input at ``first_subsampling_dl`` (barycentres, mean features,
majority labels), stored in Morton order within each sample (cache-friendly neighbourhood gathers);
level l + 1 = grid subsampling of level l at twice its cell (which keeps the order coherent).  Per level l with
radius ``r_l = conv_radius * dl_l``: ``neighbors[l]`` (level l within r_l), ``pools[l]`` (level l + 1
queries in level l within r_l) and ``upsamples[l]`` (the closest level l + 1 point within 2 r_l).
Neighbour lists are sorted by distance and cut to the level's limit H_l (given, or calibrated on the
first batch so that ``calibration_quantile`` of the neighbourhoods stay whole); the number of
truncated neighbourhoods (and pooling neighbourhoods) of every batch is in :attr:`KPPyramid.truncated`
(:attr:`KPPyramid.truncated_pools`), per sample and level in ``data_sample.metainfo['num_truncated_neighborhoods']``
(``['num_truncated_pools']``), and the first truncation is logged as a warning
(:func:`fsdlite.utils.drop_report.report_dropped`; totals in ``dropped_totals``).
"""
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from mmengine.model import BaseDataPreprocessor

from fsdlite.ops import calibrate_neighbor_limit, grid_subsample, radius_neighbors
from fsdlite.registry import MODELS
from fsdlite.utils.drop_report import report_dropped

from .spatial_order import spatial_order


@dataclass
class KPPyramid:
    """A batch of point clouds with its neighbourhood pyramid (L levels, B samples)."""
    points: List[torch.Tensor]      #: (N_l, 3) per level
    batch: List[torch.Tensor]       #: (N_l,) int64 sample id per level (sorted)
    neighbors: List[torch.Tensor]   #: (N_l, H_l) level-l neighbours, shadow index N_l
    pools: List[torch.Tensor]       #: (N_{l+1}, H_l) level-(l+1) queries in level l, shadow N_l
    upsamples: List[torch.Tensor]   #: (N_l, 1) closest level-(l+1) point, shadow N_{l+1}
    features: torch.Tensor          #: (N_0, F) input features of level 0
    batch_size: int
    cells: torch.Tensor             #: (N_raw,) level-0 row of every input point
    num_points: List[int]           #: input points per sample
    labels: Optional[torch.Tensor] = None  #: (N_0,) majority labels of level 0 (segmentation)
    truncated: List[int] = field(default_factory=list)  #: truncated neighbourhoods per level
    truncated_pools: List[int] = field(default_factory=list)  #: truncated pooling neighbourhoods per level
    #: (B, L) int64 truncated neighbourhoods per sample and level; (B, L - 1) for the pooling ones
    truncated_per_sample: Optional[torch.Tensor] = None
    truncated_pools_per_sample: Optional[torch.Tensor] = None

    @property
    def num_levels(self):
        """L, the number of levels (``len(points)``)."""
        return len(self.points)


@MODELS.register_module()
class KPDataPreprocessor(BaseDataPreprocessor):
    """Collate ``inputs['points']`` (list of (N_i, 3 + F) tensors) into a :class:`KPPyramid`.

    Args:
        first_subsampling_dl (float): level-0 grid cell.
        conv_radius (float): conv radius in cells of the level.
        num_levels (int): L.
        neighbor_limits (Sequence[int], optional): H_l per level; None -> calibrated on the first batch.
        max_neighbors (int): neighbours searched before cutting to H_l (and the calibration cap).
        calibration_quantile (float): fraction of neighbourhoods kept whole by calibration.
        feature_mode (str): 'ones' (a constant 1 feature), 'points' (the F extra columns) or
            'ones+points'.
        with_labels (bool): read ``gt_pts_seg.pts_semantic_mask`` of the samples (segmentation), when all
            samples have it.
    Returns (forward): ``dict(inputs=KPPyramid, data_samples=list)``.
    """

    FEATURE_MODES = ('ones', 'points', 'ones+points')

    def __init__(self, first_subsampling_dl, conv_radius=2.5, num_levels=5, neighbor_limits=None, max_neighbors=64,
                 calibration_quantile=0.9, feature_mode='ones', with_labels=False, non_blocking=False):
        super().__init__(non_blocking=non_blocking)
        if not first_subsampling_dl > 0 or not conv_radius > 0 or num_levels < 1:
            raise ValueError(f'KPDataPreprocessor: first_subsampling_dl ({first_subsampling_dl!r}) and conv_radius '
                             f'({conv_radius!r}) must be > 0 and num_levels ({num_levels!r}) >= 1')
        if feature_mode not in self.FEATURE_MODES:
            raise ValueError(f'KPDataPreprocessor: feature_mode must be one of {self.FEATURE_MODES}, '
                             f'got {feature_mode!r}')
        self.first_subsampling_dl, self.conv_radius, self.num_levels = first_subsampling_dl, conv_radius, num_levels
        self.max_neighbors, self.calibration_quantile = max_neighbors, calibration_quantile
        self.feature_mode, self.with_labels = feature_mode, with_labels
        if neighbor_limits is not None and len(neighbor_limits) != num_levels:
            raise ValueError(f'KPDataPreprocessor: neighbor_limits needs {num_levels} values, got {neighbor_limits!r}')
        if neighbor_limits is not None and min(int(h) for h in neighbor_limits) < 1:
            raise ValueError(f'KPDataPreprocessor: neighbor_limits must be >= 1, got {neighbor_limits!r}')
        limits = torch.tensor([int(h) for h in neighbor_limits] if neighbor_limits is not None else [-1] * num_levels)
        self.register_buffer('neighbor_limits', limits.long())  # saved with checkpoints once calibrated

    def radius(self, level):
        """Conv radius of a level."""
        return self.conv_radius * self.first_subsampling_dl * 2 ** level

    def forward(self, data, training=False):
        """Build the :class:`KPPyramid` of ``inputs['points']`` and store per-sample truncation counts in the
        metainfo.

        Raises:
            ValueError: a cloud is not (N, 3 + F).
        """
        data = self.cast_data(data)
        clouds = data['inputs']['points']
        samples = data.get('data_samples')
        clouds = list(clouds) if isinstance(clouds, (list, tuple)) else list(clouds.unbind(0))
        for i, cloud in enumerate(clouds):
            if cloud.dim() != 2 or cloud.shape[1] < 3:
                raise ValueError(f'KPDataPreprocessor: inputs.points[{i}] must be (N, 3 + F), got {tuple(cloud.shape)}')
        pyramid = self.build_pyramid(clouds, self._labels(samples, clouds))
        self._report(pyramid, samples)
        return dict(inputs=pyramid, data_samples=samples)

    def _report(self, pyramid, samples):
        """Per-sample truncation counts into the metainfo; warn the first time neighbourhoods are cut."""
        if samples is not None:
            for i, sample in enumerate(samples):
                sample.set_metainfo(dict(num_truncated_neighborhoods=pyramid.truncated_per_sample[i].tolist(),
                                         num_truncated_pools=pyramid.truncated_pools_per_sample[i].tolist()))
        limits = self.neighbor_limits.tolist()
        for kind, per_level, sizes in (('num_truncated_neighborhoods', pyramid.truncated, pyramid.points),
                                       ('num_truncated_pools', pyramid.truncated_pools, pyramid.points[1:])):
            report_dropped(self, kind, sum(per_level), lambda p=per_level, s=sizes, k=kind: (
                f'{sum(p)} of {sum(len(x) for x in s)} {"pooling " if "pools" in k else ""}neighbourhoods in this '
                f'batch lost their farthest neighbours (per level {p}): cut to neighbor_limits={limits} '
                f'(max_neighbors={self.max_neighbors})'))

    def _labels(self, samples, clouds):
        """Concatenated per-point labels, or None without labels (e.g. inference on unlabelled clouds)."""
        if not self.with_labels or samples is None:
            return None
        labelled = sum('gt_pts_seg' in s for s in samples)
        if labelled < len(samples):
            if labelled:
                report_dropped(self, 'batches_without_labels', 1, lambda: (
                    f'ignored the labels of a batch where only {labelled} of {len(samples)} samples have '
                    'gt_pts_seg (labels are read only when all samples have them)'), in_metainfo=False)
            return None
        labels = []
        for i, (sample, cloud) in enumerate(zip(samples, clouds)):
            mask = torch.as_tensor(sample.gt_pts_seg.pts_semantic_mask, device=cloud.device).long()
            if mask.shape != (cloud.shape[0],):
                raise ValueError(f'data_samples[{i}].gt_pts_seg.pts_semantic_mask has shape {tuple(mask.shape)}, '
                                 f'expected ({cloud.shape[0]},)')
            labels.append(mask)
        return torch.cat(labels)

    def _features(self, extra, n):
        ones = extra.new_ones((n, 1))
        if self.feature_mode == 'ones':
            return ones
        if self.feature_mode == 'points':
            return extra
        return torch.cat([ones, extra], 1)

    def _search(self, query, support, radius, query_batch, support_batch, limit=None):
        """``(index, counts)`` of ``radius_neighbors``; with ``limit`` only the ``limit`` nearest are searched
        for (the op sorts by distance, ties -> lower index, so this equals cutting a longer list) -- the upsampling
        search at twice the radius keeps 1 of up to ``max_neighbors``."""
        width = self.max_neighbors if limit is None else min(int(limit), self.max_neighbors)
        return radius_neighbors(query, support, radius, width, query_batch, support_batch, return_counts=True)

    def _limit(self, level, counts):
        """H_l, the columns kept at ``level`` (never more than the ``max_neighbors`` searched)."""
        if int(self.neighbor_limits[level]) < 1:  # first batch: calibrate and keep
            limit = calibrate_neighbor_limit(counts, self.calibration_quantile)
            self.neighbor_limits[level] = min(limit, self.max_neighbors)
        return min(int(self.neighbor_limits[level]), self.max_neighbors)

    def build_pyramid(self, clouds, labels=None):
        """Grid-subsample, then search neighbourhoods level by level (see the module docstring)."""
        sizes = [c.shape[0] for c in clouds]
        cat = torch.cat(clouds, 0)
        batch = torch.repeat_interleave(torch.arange(len(clouds), device=cat.device),
                                        torch.tensor(sizes, device=cat.device))
        xyz, extra = cat[:, :3].contiguous(), cat[:, 3:].contiguous()
        sub = grid_subsample(xyz, self.first_subsampling_dl, batch, extra if extra.shape[1] else None, labels)
        order = spatial_order(sub.points, self.first_subsampling_dl, sub.batch)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(len(order), device=order.device)
        extra = sub.features[order] if sub.features is not None else xyz.new_zeros((len(order), 0))
        features = self._features(extra, len(order))
        points, batches = [sub.points[order]], [sub.batch[order]]
        neighbors, pools, upsamples = [], [], []
        cut, cut_pools = [], []  # per level: (B,) truncated neighbourhoods per sample
        for level in range(self.num_levels):
            radius = self.radius(level)
            index, counts = self._search(points[level], points[level], radius, batches[level], batches[level])
            limit = self._limit(level, counts)
            neighbors.append(index[:, :limit].contiguous())
            cut.append(torch.bincount(batches[level][counts > limit], minlength=len(clouds)))
            if level + 1 == self.num_levels:
                break
            nxt = grid_subsample(points[level], 2 * self.first_subsampling_dl * 2 ** level, batches[level])
            points.append(nxt.points)
            batches.append(nxt.batch)
            pool, pool_counts = self._search(points[level + 1], points[level], radius, batches[level + 1],
                                             batches[level], limit)
            pools.append(pool)
            cut_pools.append(torch.bincount(batches[level + 1][pool_counts > limit], minlength=len(clouds)))
            upsamples.append(self._search(points[level], points[level + 1], 2 * radius, batches[level],
                                          batches[level + 1], 1)[0])
        return KPPyramid(points=points, batch=batches, neighbors=neighbors, pools=pools, upsamples=upsamples,
                         features=features, batch_size=len(clouds), cells=rank[sub.cell], num_points=sizes,
                         labels=sub.labels[order] if sub.labels is not None else None,
                         truncated=[int(c.sum()) for c in cut], truncated_pools=[int(c.sum()) for c in cut_pools],
                         truncated_per_sample=torch.stack(cut, 1),
                         truncated_pools_per_sample=torch.stack(cut_pools, 1) if cut_pools else
                         torch.zeros(len(clouds), 0, dtype=torch.long, device=cat.device))
