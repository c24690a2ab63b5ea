"""Kernel-point dispositions: determinism, symmetry/spread, shells, caching, rotations, bad input."""
import numpy as np
import pytest
import torch

from fsdlite.models.kpconv import kernel_points as kpm


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh on-disk cache folder and an empty in-memory cache."""
    monkeypatch.setenv('FSDLITE_CACHE', str(tmp_path))
    monkeypatch.setattr(kpm, '_MEMORY', {})
    return tmp_path / 'kernels'


def pairwise(points):
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    return d + np.eye(len(points)) * 1e9


def test_repulsion_disposition_is_centred_spread_and_scaled(cache):
    pts = kpm.unit_kernel_points(8)
    assert pts.shape == (8, 3)
    np.testing.assert_array_equal(pts[0], 0)  # fixed='center'
    radii = np.linalg.norm(pts[1:], axis=1)
    assert radii.mean() == pytest.approx(0.66)
    assert radii.std() < 0.05  # 7 points relax onto one shell around the centre
    assert pairwise(pts).min() > 0.5  # well spread: no two kernel points close together
    assert np.linalg.norm(pts.mean(0)) < 0.05  # balanced around the centre (no side favoured)


def test_generation_is_deterministic_and_cached_on_disk(cache):
    first = kpm.unit_kernel_points(6, ratio=0.5)
    files = list(cache.glob('*.npy'))
    assert len(files) == 1 and 'k006' in files[0].name
    np.testing.assert_array_equal(np.load(files[0]), first)
    kpm._MEMORY.clear()
    again = kpm.unit_kernel_points(6, ratio=0.5)  # read back from disk
    np.testing.assert_array_equal(again, first)
    fresh = kpm.repulsion_dispositions(6, ratio=0.5)  # regenerated from scratch: same result
    np.testing.assert_allclose(fresh, first)


def test_corrupt_cache_file_is_regenerated(cache):
    pts = kpm.unit_kernel_points(5)
    path = next(cache.glob('*.npy'))
    path.write_bytes(b'not a numpy file')
    kpm._MEMORY.clear()
    np.testing.assert_allclose(kpm.unit_kernel_points(5), pts)


def test_no_fixed_center(cache):
    pts = kpm.unit_kernel_points(4, fixed='none')
    assert np.linalg.norm(pts, axis=1).min() > 0.3
    assert np.linalg.norm(pts, axis=1).mean() == pytest.approx(0.66)


def test_shells_radii_and_spread(cache):
    pts = kpm.unit_kernel_points(19, shells=[1, 6, 12])
    radii = np.linalg.norm(pts, axis=1)
    np.testing.assert_allclose(radii[0], 0, atol=1e-12)
    np.testing.assert_allclose(radii[1:7], 0.4)
    np.testing.assert_allclose(radii[7:], 0.8)
    for shell in (pts[1:7], pts[7:]):
        assert pairwise(shell).min() > 0.4 * np.linalg.norm(shell[0])  # spread over the shell
        assert np.linalg.norm(shell.mean(0)) < 0.1 * np.linalg.norm(shell[0])  # no clustering on one side


def test_default_shells_for_large_k():
    assert kpm.default_shells(43) == [1, 14, 28]  # KPConvX's disposition
    shells = kpm.default_shells(80)
    assert shells[0] == 1 and sum(shells) == 80 and shells == sorted(shells) and max(shells) <= 30


def test_make_kernel_points_scales_and_rotates_about_z(cache):
    unit = torch.from_numpy(kpm.unit_kernel_points(7)).float()
    torch.manual_seed(0)
    kp = kpm.make_kernel_points(7, radius=2.0, rotation='z')
    torch.testing.assert_close(kp[:, 2], 2.0 * unit[:, 2])  # z untouched by a z rotation
    torch.testing.assert_close(kp.norm(dim=1), 2.0 * unit.norm(dim=1))
    assert not torch.allclose(kp[:, :2], 2.0 * unit[:, :2])  # the xy plane did rotate
    torch.testing.assert_close(kpm.make_kernel_points(7, 2.0, rotation='none'), 2.0 * unit)
    full = kpm.make_kernel_points(7, 1.0, rotation='all', generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(full.norm(dim=1), unit.norm(dim=1))


def test_random_rotation_is_a_proper_rotation():
    g = torch.Generator().manual_seed(2)
    for mode in ('z', 'all'):
        rot = kpm.random_rotation(3, mode, g, torch.float64)
        torch.testing.assert_close(rot @ rot.T, torch.eye(3, dtype=torch.float64))
        assert torch.det(rot) == pytest.approx(1.0)


@pytest.mark.parametrize('kwargs,match', [
    (dict(num_points=0), 'num_points'),
    (dict(num_points=5, dimension=4), 'dimension'),
    (dict(num_points=5, fixed='corner'), 'fixed'),
    (dict(num_points=5, ratio=0.0), 'ratio'),
    (dict(num_points=5, shells=[2, 3]), 'shells'),
    (dict(num_points=5, shells=[1, 3]), 'shells'),
])
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        kpm.unit_kernel_points(**kwargs)


def test_invalid_radius_and_rotation():
    with pytest.raises(ValueError, match='radius'):
        kpm.make_kernel_points(5, radius=-1.0)
    with pytest.raises(ValueError, match='rotation'):
        kpm.make_kernel_points(5, radius=1.0, rotation='x')
