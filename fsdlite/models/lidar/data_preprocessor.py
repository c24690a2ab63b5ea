"""Collate lidar point clouds and voxelize them with :func:`fsdlite.ops.voxelize`."""
import torch
from mmengine.model import BaseDataPreprocessor

from fsdlite.ops.voxelize import voxelize
from fsdlite.utils.drop_report import report_dropped
from fsdlite.registry import MODELS

from ..layers.voxel_geometry import voxel_grid


@MODELS.register_module()
class LidarDataPreprocessor(BaseDataPreprocessor):
    """Collate a batch of point clouds into one tensor and voxelize it (dynamic voxelization).

    Points outside ``point_range`` and points with any NaN/Inf value (coordinate or feature) are
    excluded from the model's input.  Nothing is lost silently: each data sample's metainfo gets
    ``num_points`` (input size), ``num_excluded_points``, ``num_out_of_range_points`` and
    ``num_non_finite_points``; the first batch with exclusions logs a warning, and the running
    totals are kept in :attr:`num_excluded_total` (``dropped_totals['num_excluded_points']``, see
    :func:`fsdlite.utils.drop_report.report_dropped`).  Models predict background for excluded points.

    Input ``data`` (from ``pseudo_collate``): ``inputs['points']`` is a list of B tensors (N_i, C)
    (C >= 3: x, y, z, features...; a single (N, C) tensor means B = 1); ``data_samples`` a list of
    B :class:`~fsdlite.structures.Det3DDataSample` (or None).

    Output ``dict(inputs=..., data_samples=...)`` where ``inputs`` holds, for the P kept points and
    V voxels:

    * ``points`` (P, C) float32, ``batch`` (P,) int64 sample index;
    * ``point_index`` (P,) int64: row of each kept point in the concatenation of the input clouds;
    * ``num_points`` (B,) int64: N_i, the input size of each cloud;
    * ``voxel_coors`` (V, 4) int64 ``[b, z, y, x]``, ``point2voxel`` (P,) int64 in ``[0, V)``,
      ``voxel_counts`` (V,) int64;
    * ``batch_size`` (int) B.

    Args:
        voxel_size (Sequence[float]): ``(vx, vy, vz)`` metres.
        point_range (Sequence[float]): ``(x_min, y_min, z_min, x_max, y_max, z_max)``.
        num_point_features (int | None): expected C; checked when given.
        non_blocking (bool): forwarded to :class:`BaseDataPreprocessor`.
    """

    def __init__(self, voxel_size, point_range, num_point_features=None, non_blocking=False):
        super().__init__(non_blocking=non_blocking)
        self.voxel_size, self.point_range, self.sparse_shape = voxel_grid(voxel_size, point_range)
        if num_point_features is not None and (isinstance(num_point_features, bool) or
                                               not isinstance(num_point_features, int) or num_point_features < 3):
            raise ValueError(f'num_point_features must be an int >= 3 (x, y, z, ...) or None, '
                             f'got {num_point_features!r}')
        self.num_point_features = num_point_features
        self.num_points_total = 0

    @property
    def num_excluded_total(self):
        """Points excluded over every batch so far."""
        return (getattr(self, 'dropped_totals', None) or {}).get('num_excluded_points', 0)

    def _points_list(self, points):
        if isinstance(points, torch.Tensor):
            points = [points]
        if not isinstance(points, (list, tuple)):
            raise TypeError(f"inputs['points'] must be a list of (N, C) tensors, got {type(points).__name__}")
        if len(points) == 0:
            raise ValueError("inputs['points'] is an empty list; expected one (N, C) tensor per sample")
        out = []
        for i, p in enumerate(points):
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"inputs['points'][{i}] must be a torch.Tensor, got {type(p).__name__}")
            if p.dim() != 2 or p.shape[1] < 3:
                raise ValueError(f"inputs['points'][{i}] must have shape (N, C>=3), got {tuple(p.shape)}")
            if p.dtype.is_complex or p.dtype == torch.bool:
                raise TypeError(f"inputs['points'][{i}] must be a real-valued tensor, got {p.dtype}")
            out.append(p.to(torch.float32))
        widths = {p.shape[1] for p in out}
        if len(widths) > 1:
            raise ValueError(f"inputs['points'] mixes feature widths {sorted(widths)}; all clouds need the same C")
        width = widths.pop()
        if self.num_point_features is not None and width != self.num_point_features:
            raise ValueError(f"inputs['points'] have C={width} columns, expected num_point_features="
                             f'{self.num_point_features}')
        return out

    def forward(self, data, training=False):
        """Collate and voxelize ``data`` (see the class docstring); returns ``dict(inputs, data_samples)``."""
        data = self.cast_data(data)
        if not isinstance(data, dict) or 'inputs' not in data or 'points' not in data['inputs']:
            raise KeyError("LidarDataPreprocessor expects data = dict(inputs=dict(points=[...]), data_samples=[...])")
        data_samples = data.get('data_samples')
        clouds = self._points_list(data['inputs']['points'])
        if data_samples is not None and len(data_samples) != len(clouds):
            raise ValueError(f'got {len(clouds)} point clouds but {len(data_samples)} data samples')
        batch_size = len(clouds)
        device = clouds[0].device
        num_points = torch.tensor([p.shape[0] for p in clouds], dtype=torch.long, device=device)
        points = torch.cat(clouds, 0)
        batch = torch.repeat_interleave(torch.arange(batch_size, device=device), num_points)
        # The voxelizer looks at x, y, z only: mark rows with a non-finite feature as non-finite too.
        finite = torch.isfinite(points).all(1)
        xyz = points[:, :3].masked_fill(~finite[:, None], float('nan'))
        vox = voxelize(xyz, self.voxel_size, self.point_range, batch=batch)
        kept = vox.point2voxel >= 0
        point_index = torch.nonzero(kept).view(-1)
        self._report(data_samples, batch, kept, finite, num_points, batch_size)
        inputs = dict(points=points[point_index], batch=batch[point_index], point_index=point_index,
                      num_points=num_points, voxel_coors=vox.voxel_coors, point2voxel=vox.point2voxel[point_index],
                      voxel_counts=vox.voxel_counts, batch_size=batch_size)
        return dict(inputs=inputs, data_samples=data_samples)

    def _report(self, data_samples, batch, kept, finite, num_points, batch_size):
        """Record per-sample exclusion counts in metainfo; warn once per preprocessor."""
        excluded = torch.bincount(batch[~kept], minlength=batch_size).tolist()
        non_finite = torch.bincount(batch[~finite], minlength=batch_size).tolist()
        sizes = num_points.tolist()
        if data_samples is not None:
            for i, sample in enumerate(data_samples):
                sample.set_metainfo(dict(num_points=sizes[i], num_excluded_points=excluded[i],
                                         num_non_finite_points=non_finite[i],
                                         num_out_of_range_points=excluded[i] - non_finite[i]))
        total_excluded = sum(excluded)
        self.num_points_total += sum(sizes)
        report_dropped(self, 'num_excluded_points', total_excluded, lambda: (
            f'excluded {total_excluded} of {sum(sizes)} points in this batch '
            f'({total_excluded - sum(non_finite)} outside point_range={list(self.point_range)}, '
            f'{sum(non_finite)} with NaN/Inf values); they are predicted as background'))


__all__ = ['LidarDataPreprocessor']
