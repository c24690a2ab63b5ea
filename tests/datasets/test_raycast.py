"""Ray casting: sensor layout, analytic distances, occlusion, column pruning vs brute force."""
import math

import numpy as np
import pytest

from fsdlite.datasets import raycast
from fsdlite.datasets.raycast import GROUND, NO_HIT, LidarSpec, cast_rays


def test_spec_layout_and_presets():
    spec = LidarSpec(num_beams=64, vertical_fov='kitti', azimuth_resolution=0.5, horizontal_fov=(-45, 45))
    assert spec.vertical_fov == (-24.8, 2.0)
    assert np.allclose(np.rad2deg(spec.elevations[[0, -1]]), [-24.8, 2.0])
    assert len(spec.azimuths) == 181 and np.allclose(np.rad2deg(spec.azimuths[[0, -1]]), [-45, 45])
    dirs = spec.ray_directions()
    assert dirs.shape == (64, 181, 3) and np.allclose(np.linalg.norm(dirs, axis=-1), 1)
    assert LidarSpec(vertical_fov='symmetric25').vertical_fov == (-25.0, 25.0)
    full = LidarSpec(horizontal_fov=(-180, 180), azimuth_resolution=1.0)
    assert len(full.azimuths) == 360 and not np.isclose(full.azimuths[0] + 2 * np.pi, full.azimuths[-1])


@pytest.mark.parametrize('kwargs,match', [
    (dict(num_beams=0), 'num_beams'),
    (dict(vertical_fov='velodyne'), 'not a preset'),
    (dict(vertical_fov=(5, -5)), 'vertical_fov'),
    (dict(azimuth_resolution=0), 'azimuth_resolution'),
    (dict(horizontal_fov=(-200, 0)), 'horizontal_fov'),
    (dict(min_range=5, max_range=2), 'min_range/max_range'),
    (dict(sensor_height=-1), 'sensor_height'),
])
def test_spec_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LidarSpec(**kwargs)


def test_ground_distance_is_analytic():
    spec = LidarSpec(num_beams=4, vertical_fov=(-20, -5), azimuth_resolution=10, horizontal_fov=(-30, 30),
                     max_range=200)
    out = cast_rays(spec, np.zeros((0, 7)))
    assert (out['hit'] == GROUND).all()
    el = np.repeat(spec.elevations, len(spec.azimuths))
    assert np.allclose(out['distance'], spec.sensor_height / np.sin(-el))
    assert np.allclose(out['cos_incidence'], np.sin(-el))


def test_box_face_distance_and_occlusion():
    spec = LidarSpec(num_beams=3, vertical_fov=(-1, 1), azimuth_resolution=1.25, horizontal_fov=(-2.5, 2.5))
    near = [10.0, 0.0, -1.73, 2.0, 4.0, 3.0, 0.0]   # front face at x = 9
    far = [20.0, 0.0, -1.73, 2.0, 8.0, 3.0, 0.0]    # hidden behind `near` for the central rays
    out = cast_rays(spec, np.array([far, near]))
    centre = out['hit'].reshape(3, -1)[1, len(spec.azimuths) // 2]
    assert centre == 1, 'the nearer box must win'
    mid = out['distance'].reshape(3, -1)[1, len(spec.azimuths) // 2]
    assert math.isclose(mid, 9.0, rel_tol=1e-12)
    assert (out['hit'] == 1).all(), 'every ray of this narrow fan hits the near box first'
    rotated = cast_rays(spec, np.array([[10.0, 0.0, -1.73, 2.0, 4.0, 3.0, math.pi / 2]]))  # now 4 m deep
    assert math.isclose(rotated['distance'].reshape(3, -1)[1, len(spec.azimuths) // 2], 8.0, rel_tol=1e-9)


def test_range_limits_drop_returns():
    spec = LidarSpec(num_beams=2, vertical_fov=(-30, -10), azimuth_resolution=5, horizontal_fov=(-10, 10),
                     min_range=4.0, max_range=100)
    out = cast_rays(spec, np.zeros((0, 7)))
    d_low = spec.sensor_height / math.sin(math.radians(30))  # 3.46 m < min_range
    assert (out['hit'].reshape(2, -1)[0] == NO_HIT).all() and d_low < 4.0
    assert (out['hit'].reshape(2, -1)[1] == GROUND).all()


def test_column_pruning_matches_brute_force():
    """Testing only the columns a box can cover gives the same hits as testing every ray."""
    rng = np.random.default_rng(0)
    spec = LidarSpec(num_beams=12, azimuth_resolution=1.0, horizontal_fov=(-180, 180))
    boxes = np.column_stack([rng.uniform(-30, 30, 25), rng.uniform(-30, 30, 25), np.full(25, -1.73),
                             rng.uniform(0.3, 6, 25), rng.uniform(0.3, 3, 25), rng.uniform(0.5, 4, 25),
                             rng.uniform(-np.pi, np.pi, 25)])
    boxes = boxes[np.hypot(boxes[:, 0], boxes[:, 1]) > 5]
    out = cast_rays(spec, boxes)
    flat = spec.ray_directions().reshape(-1, 3)
    best = np.full(len(flat), np.inf)
    for box in boxes:
        t, _, _ = raycast._box_entry(flat, box)
        best = np.minimum(best, t)
    box_hits = out['hit'] >= 0
    assert box_hits.sum() > 100
    assert np.allclose(out['distance'][box_hits], best[box_hits])
    missed = ~box_hits & np.isfinite(best)  # a box lies on the ray, but behind the ground or out of range
    assert (best[missed] >= np.minimum(out['distance'][missed], spec.max_range)).all()
