"""Grid geometry of voxelize shared by the wrapper and the pure-torch reference (no compiled code)."""
import math

from .. import _checks
from .._checks import OpValueError

_OP = 'voxelize'
INT64_MAX = 2**63 - 1


def grid_shape(voxel_size, point_range):
    """Number of voxels per axis, ``round((max - min) / size)`` (half away from zero, as mmcv).

    Args:
        voxel_size: 3 positive floats (x, y, z).
        point_range: 6 floats ``[x_min, y_min, z_min, x_max, y_max, z_max]`` with max > min.
    Returns:
        tuple[int, int, int]: ``(nz, ny, nx)``.
    """
    size, lower, upper = check_geometry(voxel_size, point_range)
    return tuple(reversed(_cells(size, lower, upper)))


def check_geometry(voxel_size, point_range):
    """Validate voxel_size / point_range; returns ``(size[3], lower[3], upper[3])`` as floats (x, y, z)."""
    size = _checks.float_sequence(_OP, 'voxel_size', voxel_size, 3)
    if any(s <= 0 for s in size):
        raise OpValueError(f'{_OP}: voxel_size must be > 0 on every axis, got {list(voxel_size)!r}')
    bounds = _checks.float_sequence(_OP, 'point_range', point_range, 6)
    lower, upper = bounds[:3], bounds[3:]
    if any(hi <= lo for lo, hi in zip(lower, upper)):
        raise OpValueError(f'{_OP}: point_range must be [x_min, y_min, z_min, x_max, y_max, z_max] with '
                           f'max > min on every axis, got {bounds!r}')
    cells = _cells(size, lower, upper)
    for axis, n in zip('xyz', cells):
        if n < 1:
            raise OpValueError(f'{_OP}: point_range {bounds!r} with voxel_size {size!r} gives {n} voxels on axis '
                               f'{axis}; expected at least 1 (range narrower than half a voxel)')
    return size, lower, upper


def check_key_range(cells_zyx, num_batches):
    """Raise if ``num_batches * nz * ny * nx`` voxel keys would overflow int64."""
    total = num_batches * math.prod(cells_zyx)
    if total > INT64_MAX:
        raise OpValueError(f'{_OP}: {num_batches} batches x grid {tuple(cells_zyx)} has {total} voxels, more than '
                           f'2^63; use fewer batch ids or a coarser grid')


def _cells(size, lower, upper):
    return [int(math.floor((hi - lo) / s + 0.5)) for s, lo, hi in zip(size, lower, upper)]
