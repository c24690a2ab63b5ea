"""The simulated lidar: beam layout, ray grid and measurement model (numpy).

The default sensor is KITTI's Velodyne HDL-64E: 64 lasers in two blocks (the upper 32 from +2.0 deg down to
-8.33 deg, 1/3 deg apart; the lower 32 from -8.83 deg to -24.33 deg, 1/2 deg apart), an azimuth step of
0.18 deg (about 2000 columns per turn at 10 Hz), mounted 1.73 m above the road. ``num_beams < 64`` keeps an
evenly spaced subset of those lasers (coarse frames for fast tests); ``vertical_fov`` as a (low, high) pair
spaces the beams uniformly instead.

Rays start at the sensor (the lidar origin). Only the rays that can reach the camera's field of view are cast
when ``camera_fov`` is set; the points are cropped to it exactly afterwards.
"""
from dataclasses import dataclass

import numpy as np

from ...structures.camera import KITTI_IMAGE_SIZE, KITTI_NOMINAL_CALIB, lidar2img_from_calib


def hdl64e_elevations():
    """(64,) KITTI HDL-64E nominal beam elevations in degrees, highest first."""
    return np.concatenate([np.linspace(2.0, -8.33, 32), np.linspace(-8.83, -24.33, 32)])


# Vertical field-of-view presets (degrees, lowest and highest beam); 'kitti' is the HDL-64E's own layout.
VERTICAL_FOV = {'kitti': 'hdl64e', 'symmetric25': (-25.0, 25.0)}


@dataclass(frozen=True)
class LidarSpec:
    """A spinning multi-beam lidar.

    Attributes:
        num_beams (int): lasers; with the 'kitti' layout at most 64 (fewer: an evenly spaced subset).
        vertical_fov (str | tuple): 'kitti' (the HDL-64E's non-uniform layout), 'symmetric25', or a
            (low, high) pair in degrees for uniformly spaced beams.
        azimuth_resolution (float): degrees between columns (0.18 for the HDL-64E at 10 Hz).
        horizontal_fov (tuple): (min, max) azimuth in degrees (0 = +x, counter-clockwise).
        min_range, max_range (float): returns outside [min_range, max_range] m are not reported (KITTI's scans
            end at 80 m).
        sensor_height (float): height of the sensor above the road under the ego vehicle (m).
        camera_fov (bool): cast only rays that can reach KITTI's left colour camera image and crop the points
            to it (as KITTI's labelled data, ``velodyne_reduced``); False keeps every ray of ``horizontal_fov``.
    """
    num_beams: int = 64
    vertical_fov: object = 'kitti'
    azimuth_resolution: float = 0.18
    horizontal_fov: tuple = (-45.0, 45.0)
    min_range: float = 2.5
    max_range: float = 80.0
    sensor_height: float = 1.73
    camera_fov: bool = True

    def __post_init__(self):
        fov = VERTICAL_FOV.get(self.vertical_fov, self.vertical_fov) if isinstance(self.vertical_fov, str) \
            else tuple(float(v) for v in self.vertical_fov)
        if isinstance(fov, str) and fov != 'hdl64e':
            raise ValueError(f'LidarSpec: vertical_fov={self.vertical_fov!r} is not a preset; expected one of '
                             f'{sorted(VERTICAL_FOV)} or a (low, high) pair of degrees')
        az_lo, az_hi = (float(v) for v in self.horizontal_fov)
        beams_ok = isinstance(self.num_beams, (int, np.integer)) and not isinstance(self.num_beams, bool) \
            and self.num_beams >= 1 and (fov != 'hdl64e' or self.num_beams <= 64)
        checks = [
            (beams_ok, 'num_beams', self.num_beams, 'an int in [1, 64] for the kitti layout, >= 1 otherwise'),
            (fov == 'hdl64e' or (-90 < fov[0] < fov[1] < 90) or (self.num_beams == 1 and -90 < fov[0] <= fov[1] < 90),
             'vertical_fov', self.vertical_fov, "'kitti', 'symmetric25' or -90 < low < high < 90 degrees"),
            (self.azimuth_resolution > 0, 'azimuth_resolution', self.azimuth_resolution, '> 0 degrees'),
            (-180 <= az_lo < az_hi <= 180, 'horizontal_fov', self.horizontal_fov, '-180 <= min < max <= 180'),
            (0 <= self.min_range < self.max_range, 'min_range/max_range', (self.min_range, self.max_range),
             '0 <= min_range < max_range'),
            (self.sensor_height > 0, 'sensor_height', self.sensor_height, '> 0 m'),
        ]
        for ok, name, value, expected in checks:
            if not ok:
                raise ValueError(f'LidarSpec: {name}={value!r} is invalid; expected {expected}')
        object.__setattr__(self, 'vertical_fov', fov)
        object.__setattr__(self, 'horizontal_fov', (az_lo, az_hi))

    @property
    def elevations(self):
        """(num_beams,) beam elevations in radians, highest first."""
        if self.vertical_fov == 'hdl64e':
            layout = hdl64e_elevations()
            keep = np.round(np.linspace(0, 63, self.num_beams)).astype(int) if self.num_beams > 1 else [40]
            return np.deg2rad(layout[keep])
        return np.deg2rad(np.linspace(self.vertical_fov[1], self.vertical_fov[0], self.num_beams))

    @property
    def azimuths(self):
        """(num_columns,) column azimuths in radians, ascending (a full turn is split evenly)."""
        lo, hi = self.horizontal_fov
        span, res = hi - lo, self.azimuth_resolution
        if span >= 360 - 1e-9:
            n = max(1, int(round(span / res)))
            return np.deg2rad(lo + np.arange(n) * (span / n))
        return np.deg2rad(lo + np.arange(int(np.floor(span / res + 1e-9)) + 1) * res)

    @property
    def lidar2img(self):
        """(4, 4) lidar -> pixel matrix of the camera the frames are cropped to (KITTI's nominal calib)."""
        return lidar2img_from_calib(KITTI_NOMINAL_CALIB)

    @property
    def image_size(self):
        """(width, height) of the camera image the frames are cropped to."""
        return KITTI_IMAGE_SIZE


def ray_grid(spec, margin_deg=1.5):
    """The rays to cast: the beam x column grid, limited to the camera's view when ``spec.camera_fov``.

    A ray is kept when its direction, seen from the camera (rotation only), lies inside the image grown by
    ``margin_deg`` on every side, so the exact per-point crop afterwards loses nothing.

    Returns:
        dict: ``directions`` (R, 3) unit vectors, ``beam`` (R,) and ``column`` (R,) int indices,
        ``elevation`` (num_beams,) and ``azimuth`` (num_columns,) radians.
    """
    el, az = spec.elevations, spec.azimuths
    beam, column = np.meshgrid(np.arange(len(el)), np.arange(len(az)), indexing='ij')
    beam, column = beam.reshape(-1), column.reshape(-1)
    ce = np.cos(el)[beam]
    directions = np.stack([ce * np.cos(az)[column], ce * np.sin(az)[column], np.sin(el)[beam]], axis=1)
    if spec.camera_fov:
        keep = _in_view(directions, spec.lidar2img, spec.image_size, np.deg2rad(margin_deg))
        directions, beam, column = directions[keep], beam[keep], column[keep]
    return dict(directions=directions, beam=beam, column=column, elevation=el, azimuth=az)


def _in_view(directions, lidar2img, image_size, margin):
    """(R,) bool: directions inside the camera frustum grown by ``margin`` radians (translation ignored)."""
    m = lidar2img[:3, :3]
    pix = directions @ m.T
    depth = pix[:, 2]
    fx, cx, fy, cy = lidar2img[0, 0], lidar2img[0, 2], lidar2img[1, 1], lidar2img[1, 2]
    # the camera's projection: lidar2img[0:2] = K[0:2] @ R, so pixel offsets are focal * tan(angle)
    with np.errstate(divide='ignore', invalid='ignore'):
        u, v = pix[:, 0] / depth, pix[:, 1] / depth
    width, height = image_size
    ang_u = np.arctan((u - cx) / fx)
    ang_v = np.arctan((v - cy) / fy)
    lo_u, hi_u = np.arctan(-cx / fx) - margin, np.arctan((width - cx) / fx) + margin
    lo_v, hi_v = np.arctan(-cy / fy) - margin, np.arctan((height - cy) / fy) + margin
    return (depth > 0) & (ang_u >= lo_u) & (ang_u <= hi_u) & (ang_v >= lo_v) & (ang_v <= hi_v)


@dataclass(frozen=True)
class SensorNoise:
    """Measurement model.

    Attributes:
        range_noise (float): std-dev of the range error (m).
        dropout (float): probability that a return is lost at random.
        intensity_noise (float): std-dev of the additive reflectance noise.
        texture (float): std-dev of the per-point log-normal variation of a surface's reflectance.
        detection_floor (float): a return is detected with probability
            ``min(1, reflectance x incidence / (detection_floor x (range / 50 m)^2))``: dark and grazing
            surfaces fade with range, as a real receiver's threshold makes them.
        zero_below (float): reflectance readings below this are reported as 0 (the sensor's floor).
        zero_share (float): probability that a return reads 0 whatever the surface (KITTI: ~8 % of road points read 0).
    """
    range_noise: float = 0.015
    dropout: float = 0.015
    intensity_noise: float = 0.02
    texture: float = 0.25
    detection_floor: float = 0.01
    zero_below: float = 0.03
    zero_share: float = 0.1

    def __post_init__(self):
        if self.range_noise < 0 or not 0 <= self.dropout < 1 or self.intensity_noise < 0 or self.texture < 0 \
                or self.detection_floor < 0 or not 0 <= self.zero_below < 1 or not 0 <= self.zero_share < 1:
            raise ValueError('SensorNoise: expected range_noise, intensity_noise, texture, detection_floor >= 0 and '
                             f'dropout, zero_below, zero_share in [0, 1); got {self}')


__all__ = ['LidarSpec', 'SensorNoise', 'ray_grid', 'hdl64e_elevations', 'VERTICAL_FOV']
