"""Ray casting of a spinning multi-beam lidar against a ground plane and rotated boxes (numpy).

The sensor sits at the origin of the lidar frame, the ground is the plane ``z = -sensor_height``
and every object is a 7-dof box ``[x, y, z_bottom, l, w, h, yaw]``.  Rays form a grid of
``num_beams`` elevations x azimuth columns; each ray returns its nearest hit (occlusion), so an
object hides what is behind it.  Per box only the azimuth columns its footprint can cover are
tested, which keeps a 64-beam frame to a few tens of milliseconds.
"""
from dataclasses import dataclass

import numpy as np

GROUND = -1  # hit id of the ground plane
NO_HIT = -2  # hit id of a ray that returns nothing within range

# Vertical field of view presets (degrees, lowest beam first).
VERTICAL_FOV = {
    'kitti': (-24.8, 2.0),       # Velodyne HDL-64E as in KITTI
    'symmetric25': (-25.0, 25.0),
}


@dataclass(frozen=True)
class LidarSpec:
    """A spinning lidar: beam layout, field of view, range limits and mounting height.

    Attributes:
        num_beams (int): number of lasers (elevation rows).
        vertical_fov (tuple | str): (lowest, highest) beam elevation in degrees, or a key of
            :data:`VERTICAL_FOV` ('kitti' = -24.8..+2.0, 'symmetric25' = -25..+25).
        azimuth_resolution (float): degrees between azimuth columns.
        horizontal_fov (tuple): (min, max) azimuth in degrees (0 = +x, counter-clockwise); use
            (-45, 45) for KITTI's front camera crop and (-180, 180) for a full sweep.
        min_range (float), max_range (float): returns outside [min_range, max_range] m are dropped.
        sensor_height (float): height of the sensor above the ground plane (m).
    """
    num_beams: int = 64
    vertical_fov: tuple = 'kitti'
    azimuth_resolution: float = 0.16
    horizontal_fov: tuple = (-45.0, 45.0)
    min_range: float = 1.0
    max_range: float = 80.0
    sensor_height: float = 1.73

    def __post_init__(self):
        fov = VERTICAL_FOV.get(self.vertical_fov, self.vertical_fov) if isinstance(self.vertical_fov, str) \
            else self.vertical_fov
        if isinstance(fov, str):
            raise ValueError(f'vertical_fov={self.vertical_fov!r} is not a preset; expected one of '
                             f'{sorted(VERTICAL_FOV)} or a (low, high) pair of degrees')
        lo, hi = (float(v) for v in fov)
        az_lo, az_hi = (float(v) for v in self.horizontal_fov)
        checks = [
            (int(self.num_beams) >= 1, 'num_beams', self.num_beams, '>= 1'),
            (-90 < lo < hi < 90 or (self.num_beams == 1 and -90 < lo <= hi < 90), 'vertical_fov', fov,
             '-90 < low < high < 90 degrees'),
            (self.azimuth_resolution > 0, 'azimuth_resolution', self.azimuth_resolution, '> 0 degrees'),
            (-180 <= az_lo < az_hi <= 180, 'horizontal_fov', self.horizontal_fov, '-180 <= min < max <= 180'),
            (0 <= self.min_range < self.max_range, 'min_range/max_range', (self.min_range, self.max_range),
             '0 <= min_range < max_range'),
            (self.sensor_height > 0, 'sensor_height', self.sensor_height, '> 0 m'),
        ]
        for ok, name, value, expected in checks:
            if not ok:
                raise ValueError(f'LidarSpec: {name}={value!r} is invalid; expected {expected}')
        object.__setattr__(self, 'vertical_fov', (lo, hi))
        object.__setattr__(self, 'horizontal_fov', (az_lo, az_hi))

    @property
    def elevations(self):
        """(num_beams,) beam elevations in radians, lowest first."""
        return np.deg2rad(np.linspace(*self.vertical_fov, self.num_beams))

    @property
    def azimuths(self):
        """(num_columns,) column azimuths in radians, ascending: ``min, min + res, ...`` up to ``max``
        (a full 360 deg sweep is split evenly, without repeating its first column)."""
        lo, hi = self.horizontal_fov
        span, res = hi - lo, self.azimuth_resolution
        if span >= 360 - 1e-9:
            n = max(1, int(round(span / res)))
            return np.deg2rad(lo + np.arange(n) * (span / n))
        return np.deg2rad(lo + np.arange(int(np.floor(span / res + 1e-9)) + 1) * res)

    def ray_directions(self):
        """(num_beams, num_columns, 3) unit ray directions."""
        el, az = self.elevations[:, None], self.azimuths[None, :]
        return np.stack(np.broadcast_arrays(np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)), axis=-1)


def _wrap(angle):
    return (angle + np.pi) % (2 * np.pi) - np.pi


def _columns_covering(azimuths, box):
    """Indices of the azimuth columns that can hit ``box`` (conservative, from its footprint corners)."""
    x, y, _, l, w, _, yaw = box
    c, s = np.cos(yaw), np.sin(yaw)
    local = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]]) * (0.5 * np.array([l, w]))
    corners = local @ np.array([[c, s], [-s, c]]) + np.array([x, y])
    centre_az = np.arctan2(y, x)
    offsets = _wrap(np.arctan2(corners[:, 1], corners[:, 0]) - centre_az)
    half_span = np.abs(offsets).max() + 1e-6
    if np.hypot(x, y) <= 0.5 * np.hypot(l, w):  # sensor (nearly) inside the footprint: every column
        return np.arange(len(azimuths))
    return np.flatnonzero(np.abs(_wrap(azimuths - centre_az)) <= half_span)


def _box_entry(directions, box):
    """Entry distance and local hit axis of rays from the origin into one box.

    Returns:
        (t, axis, sign): (R,) distances (inf where missed), (R,) int axis (0: x, 1: y, 2: z) of the
        entered face and (R,) its outward sign in the box frame.
    """
    x, y, zb, l, w, h, yaw = box
    c, s = np.cos(yaw), np.sin(yaw)
    rot = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])  # world -> box frame
    origin = rot @ -np.array([x, y, zb + 0.5 * h])
    d = directions @ rot.T
    half = 0.5 * np.array([l, w, h])
    with np.errstate(divide='ignore', invalid='ignore'):
        inv = 1.0 / d
        t1 = (-half - origin) * inv
        t2 = (half - origin) * inv
    near = np.minimum(t1, t2)
    axis = near.argmax(axis=1)
    t_near = np.take_along_axis(near, axis[:, None], axis=1)[:, 0]
    t_far = np.maximum(t1, t2).min(axis=1)
    hit = (t_near <= t_far) & (t_near > 0)  # NaN (a ray exactly in a face plane) counts as a miss
    t = np.where(hit, t_near, np.inf)
    sign = -np.sign(np.take_along_axis(d, axis[:, None], axis=1)[:, 0])
    return t, axis, sign


def cast_rays(spec, boxes):
    """Cast every ray of ``spec`` against the ground and ``boxes``.

    Args:
        spec (LidarSpec): the sensor.
        boxes (ndarray): (K, 7) float64 boxes ``[x, y, z_bottom, l, w, h, yaw]`` in the lidar frame.
    Returns:
        dict: ``directions`` (R, 3) unit rays (R = beams x columns, beam-major), ``distance`` (R,)
        nearest-hit distance (inf for no return), ``hit`` (R,) int64 box index, :data:`GROUND` or
        :data:`NO_HIT`, ``cos_incidence`` (R,) |cos| of the angle between ray and surface normal.
    """
    directions = spec.ray_directions()
    num_beams, num_cols, _ = directions.shape
    flat = directions.reshape(-1, 3)
    distance = np.full(len(flat), np.inf)
    hit = np.full(len(flat), NO_HIT, dtype=np.int64)
    cos_inc = np.zeros(len(flat))
    down = flat[:, 2] < 0
    distance[down] = -spec.sensor_height / flat[down, 2]
    hit[down] = GROUND
    cos_inc[down] = -flat[down, 2]
    azimuths = spec.azimuths
    for k, box in enumerate(np.asarray(boxes, dtype=np.float64)):
        cols = _columns_covering(azimuths, box)
        if len(cols) == 0:
            continue
        rays = (np.arange(num_beams)[:, None] * num_cols + cols[None, :]).reshape(-1)
        t, axis, sign = _box_entry(flat[rays], box)
        closer = t < distance[rays]
        rays, t, axis, sign = rays[closer], t[closer], axis[closer], sign[closer]
        distance[rays] = t
        hit[rays] = k
        # |cos| between the ray and the entered face's normal = |component of the ray along that axis|
        yaw = box[6]
        normals = np.zeros((len(rays), 3))
        normals[np.arange(len(rays)), axis] = sign
        c, s = np.cos(yaw), np.sin(yaw)
        world = np.stack([normals[:, 0] * c - normals[:, 1] * s, normals[:, 0] * s + normals[:, 1] * c,
                          normals[:, 2]], axis=1)
        cos_inc[rays] = np.abs((world * flat[rays]).sum(axis=1))
    far = (distance > spec.max_range) | (distance < spec.min_range)
    distance[far] = np.inf
    hit[far] = NO_HIT
    return dict(directions=flat, distance=distance, hit=hit, cos_incidence=cos_inc)
