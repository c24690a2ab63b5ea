"""Ray casting of the simulator: exact hits against boxes, prisms and ellipsoids, angular windows that never
miss a hit, occlusion, and the materials' behaviour (glass, foliage, mesh, facades)."""
import numpy as np
import pytest

from fsdlite.datasets.sim.geometry import (FACADE, GLASS, MESH, VOLUME, Material, PrimitiveSet, angular_windows,
                                           box_planes, cast, prism_planes, window_pairs)
from fsdlite.datasets.sim.sensor import LidarSpec, ray_grid


def _grid(spec):
    grid = ray_grid(spec)
    index = np.full((len(grid['elevation']), len(grid['azimuth'])), -1)
    index[grid['beam'], grid['column']] = np.arange(len(grid['beam']))
    return grid, index


def _cast(prims, spec, seed=0):
    grid, index = _grid(spec)
    return grid, cast(prims, grid['directions'], index, grid['elevation'], grid['azimuth'],
                      np.random.default_rng(seed))


def test_box_hit_distance_and_incidence():
    spec = LidarSpec(num_beams=1, vertical_fov=(0.0, 0.0), azimuth_resolution=1.0, horizontal_fov=(-2.0, 2.0),
                     camera_fov=False)
    prims = PrimitiveSet()
    prims.add_box([10.0, 0.0, 0.0], [2.0, 4.0, 2.0], 0.0, Material(0.5))  # front face at x = 9
    grid, hits = _cast(prims, spec)
    d = grid['directions']
    expected = 9.0 / d[:, 0]
    assert np.allclose(hits['distance'], expected)
    assert np.allclose(hits['cos_incidence'], d[:, 0])
    rotated = PrimitiveSet()
    rotated.add_box([10.0, 0.0, 0.0], [2.0, 4.0, 2.0], np.pi / 2, Material(0.5))  # now 4 m deep: face at x = 8
    _, hits = _cast(rotated, spec)
    assert np.allclose(hits['distance'], 8.0 / d[:, 0])


def test_ellipsoid_and_prism_hits():
    spec = LidarSpec(num_beams=1, vertical_fov=(0.0, 0.0), azimuth_resolution=0.5, horizontal_fov=(-0.5, 0.5),
                     camera_fov=False)
    prims = PrimitiveSet()
    prims.add_ellipsoid([20.0, 0.0, 0.0], [1.0, 2.0, 3.0], 0.0, Material(0.3))
    grid, hits = _cast(prims, spec)
    centre = np.argmin(np.abs(grid['directions'][:, 1]))
    assert hits['distance'][centre] == pytest.approx(19.0)
    pole = PrimitiveSet()
    pole.add_polyhedron(prism_planes([20.0, 0.0, 0.0], 0.5, 4.0), [19.4, -0.6, -2, 20.6, 0.6, 2], Material(0.3))
    _, hits = _cast(pole, spec)
    assert hits['distance'][centre] == pytest.approx(19.5)


def test_windows_never_miss_a_hit():
    """Casting through the angular windows equals testing every ray against every primitive."""
    rng = np.random.default_rng(3)
    spec = LidarSpec(num_beams=16, azimuth_resolution=1.0, horizontal_fov=(-180, 180), camera_fov=False)
    grid, index = _grid(spec)
    prims = PrimitiveSet()
    for _ in range(25):
        centre = rng.uniform([-20, -20, -2], [20, 20, 2])
        size = rng.uniform(0.3, 6.0, 3)
        prims.add_box(centre, size, rng.uniform(-np.pi, np.pi), Material(0.4), pitch=rng.uniform(-0.5, 0.5))
    prims.add_box([0.0, 0.0, -2.5], [60, 60, 1.0], 0.0, Material(0.2))  # a slab under the sensor
    arr = prims.arrays()
    prim, ray = window_pairs(angular_windows(arr['bounds'], grid['elevation'], grid['azimuth']), index)
    windowed = set(zip(prim.tolist(), ray.tolist()))
    d = grid['directions']
    for p in range(len(arr['kind'])):
        planes = arr['planes'][p]
        nd = d @ planes[:, :3].T
        with np.errstate(divide='ignore', invalid='ignore'):
            t = planes[:, 3] / nd
        t_in = np.where(nd < 0, t, -np.inf).max(1)
        t_out = np.where(nd > 0, t, np.inf).min(1)
        hit = np.flatnonzero((t_in <= t_out) & (t_in > 0))
        assert all((p, int(r)) in windowed for r in hit), p


def test_nearest_surface_occludes():
    spec = LidarSpec(num_beams=3, vertical_fov=(-1, 1), azimuth_resolution=1.0, horizontal_fov=(-2, 2),
                     camera_fov=False)
    prims = PrimitiveSet()
    prims.add_box([30.0, 0.0, 0.0], [1.0, 20.0, 20.0], 0.0, Material(0.2), owner=0)
    prims.add_box([10.0, 0.0, 0.0], [1.0, 20.0, 20.0], 0.0, Material(0.2), owner=1)
    _, hits = _cast(prims, spec)
    assert (hits['owner'] == 1).all() and (hits['distance'] < 11).all()
    assert hits['owner_rays'].tolist() == [len(hits['owner'])] * 2  # both would be seen alone


@pytest.mark.parametrize('material, check', [
    (Material(0.05, GLASS, a=1.0, b=0.0), lambda h: (h['owner'] == 1).all()),
    (Material(0.05, GLASS, a=0.0, b=1.0), lambda h: ((h['distance'] > 10.2) & (h['distance'] < 11.3)).all()),
    (Material(0.3, MESH, a=1.0), lambda h: (h['owner'] == 1).all()),
    (Material(0.3, VOLUME, a=0.01), lambda h: (h['owner'] == 0).all() & (h['distance'] < 10.2).all()),
    (Material(0.3, VOLUME, a=1e6), lambda h: (h['owner'] == 1).all()),
])
def test_materials(material, check):
    spec = LidarSpec(num_beams=5, vertical_fov=(-2, 2), azimuth_resolution=0.5, horizontal_fov=(-3, 3),
                     camera_fov=False)
    prims = PrimitiveSet()
    prims.add_box([11.0, 0.0, 0.0], [2.0, 20.0, 20.0], 0.0, material, owner=0)  # front face at x = 10
    prims.add_box([40.0, 0.0, 0.0], [2.0, 60.0, 60.0], 0.0, Material(0.2), owner=1)  # a wall behind
    _, hits = _cast(prims, spec)
    assert check(hits)


def test_facade_windows_drop_or_deepen_returns():
    spec = LidarSpec(num_beams=40, vertical_fov=(-10, 25), azimuth_resolution=0.5, horizontal_fov=(-20, 20),
                     camera_fov=False)
    prims = PrimitiveSet()
    facade = (np.array([12.0, -20.0, -1.7]), np.pi / 2, 3.0, 3.0)  # wall along y, its base at z = -1.7
    prims.add_box([13.0, 0.0, 5.0], [2.0, 40.0, 14.0], 0.0, Material(0.3, FACADE, a=0.4), facade=facade)
    grid, hits = _cast(prims, spec)
    seen = hits['seen_owner'] == -1  # static world: every ray meets the wall
    depth = hits['distance'] * grid['directions'][:, 0]
    returned = np.isfinite(hits['distance'])
    assert 0.05 < (~returned).mean() < 0.5  # windows drop some returns
    assert (depth[returned] > 12.5).any() and np.allclose(depth[returned].min(), 12.0)  # rooms behind windows
    assert seen.all()


def test_box_planes_contain_their_centre():
    planes = box_planes([1.0, 2.0, 3.0], [2.0, 1.0, 0.5], 0.3, 0.2, 0.1)
    assert (planes[:, :3] @ [1.0, 2.0, 3.0] <= planes[:, 3]).all()
    assert np.allclose(np.linalg.norm(planes[:, :3], axis=1), 1.0)


def test_bad_primitives_raise():
    prims = PrimitiveSet()
    with pytest.raises(ValueError, match='planes must be'):
        prims.add_polyhedron(np.zeros((17, 4)) + 1, np.zeros(6), Material(0.1))
    with pytest.raises(ValueError, match='zero normal'):
        prims.add_polyhedron(np.zeros((2, 4)), np.zeros(6), Material(0.1))
    with pytest.raises(ValueError, match='radii'):
        prims.add_ellipsoid([0, 0, 0], [1.0, 0.0, 1.0], 0.0, Material(0.1))
    with pytest.raises(ValueError, match='facade'):
        prims.add_box([0, 0, 0], [1, 1, 1], 0.0, Material(0.1, FACADE))
