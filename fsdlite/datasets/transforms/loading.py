"""Reading point files (raw little-endian float32 ``.bin``, as KITTI velodyne and mmdet3d use)."""
import os

import numpy as np
import torch
from mmcv.transforms import BaseTransform

from ...registry import TRANSFORMS
from ...utils.errors import DataError
from ._fields import count_dropped


def load_points(path, load_dim=4, use_dim=4):
    """Read a ``.bin`` point file.

    Args:
        path (str | Path): file of ``N * load_dim`` float32 values.
        load_dim (int): values per point stored in the file.
        use_dim (int | sequence): the first ``use_dim`` columns, or the listed column indices.
    Returns:
        Tensor: (N, len(use_dim)) float32, N >= 1 (non-finite rows included; see :func:`drop_non_finite`).
    Raises:
        FileNotFoundError: no such file.
        DataError: an empty file (a labelled frame would train on nothing), or a size that is not a whole number of
            ``load_dim`` float32 values (a truncated or foreign file: the trailing bytes were ignored before).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f'point file {str(path)!r} does not exist')
    columns = list(range(use_dim)) if isinstance(use_dim, int) else [int(c) for c in use_dim]
    if not columns or min(columns) < 0 or max(columns) >= load_dim or len(columns) < 3:
        raise ValueError(f'use_dim={use_dim!r} must select at least 3 of the load_dim={load_dim} columns')
    size, point_bytes = os.path.getsize(path), 4 * load_dim
    if size == 0:
        raise DataError(f'point file {str(path)!r} is empty (0 bytes); expected {point_bytes} bytes per point '
                        f'({load_dim} float32 values)')
    if size % point_bytes:
        raise DataError(f'point file {str(path)!r} holds {size} bytes, not a whole number of {point_bytes}-byte points '
                        f'({load_dim} float32 values: {size // point_bytes} points and {size % point_bytes} bytes '
                        'left over); a truncated file, or is load_dim wrong (KITTI 4, nuScenes 5)?')
    raw = np.fromfile(path, dtype='<f4')
    return torch.from_numpy(raw.reshape(-1, load_dim)[:, columns].copy())


def drop_non_finite(points):
    """Remove rows with NaN/Inf; returns (points, number removed)."""
    finite = torch.isfinite(points).all(dim=1)
    return points[finite], int((~finite).sum())


@TRANSFORMS.register_module()
class LoadPointsFromFile(BaseTransform):
    """Load ``results['lidar_path']`` into ``results['points']`` (N, C) float32.

    Rows with NaN/Inf are removed, counted in ``results['num_points_invalid']`` and reported (a warning the
    first time, totals in :attr:`dropped_totals`).  Only for results
    without per-point masks (masks loaded earlier would no longer line up).

    Args:
        load_dim (int): values per point in the file.
        use_dim (int | sequence): columns to keep (see :func:`load_points`).
    """

    def __init__(self, load_dim=4, use_dim=4):
        self.load_dim, self.use_dim = int(load_dim), use_dim

    def transform(self, results):
        """Set ``points`` (N, C) float32 (finite rows only), ``num_pts_feats`` and ``num_points_invalid``.

        Raises:
            ValueError: the results already carry per-point masks.
        """
        if 'pts_semantic_mask' in results or 'pts_instance_mask' in results:
            raise ValueError('LoadPointsFromFile: results already carry per-point masks; load points first')
        points, invalid = drop_non_finite(load_points(results['lidar_path'], self.load_dim, self.use_dim))
        count_dropped(self, results, 'num_points_invalid', invalid, len(points) + invalid,
                      f"points with NaN/Inf values in {str(results['lidar_path'])!r}")
        results['points'] = points
        results['num_pts_feats'] = points.shape[1]
        return results

    def __repr__(self):
        return f'{type(self).__name__}(load_dim={self.load_dim}, use_dim={self.use_dim})'
