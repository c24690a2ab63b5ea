"""Synthetic point-shape datasets: determinism, geometry of the primitives, scenes, bad arguments."""
import numpy as np
import pytest
import torch

from fsdlite.datasets.point_shapes import (PRIMITIVES, PointShapesDataset, PrimitiveScenesDataset, partial_view,
                                           sample_primitive)
from fsdlite.registry import DATASETS


def test_samples_are_deterministic_balanced_and_split_dependent():
    ds = PointShapesDataset(num_samples=12, seed=1)
    a, b = ds[4], ds[4]
    torch.testing.assert_close(a['inputs']['points'], b['inputs']['points'])
    assert [int(ds[i]['data_samples'].gt_label) for i in range(12)] == [i % 6 for i in range(12)]
    other = PointShapesDataset(num_samples=12, seed=1, split='val')[4]['inputs']['points']
    assert other.shape != a['inputs']['points'].shape or not torch.equal(other, a['inputs']['points'])
    assert ds.metainfo['classes'] == PRIMITIVES and len(ds) == 12
    assert ds[-1]['data_samples'].metainfo['sample_idx'] == 11
    assert a['inputs']['points'].dtype == torch.float32 and a['inputs']['points'].shape[1] == 3


@pytest.mark.parametrize('name', PRIMITIVES)
def test_primitive_surfaces(name):
    rng = np.random.default_rng(0)
    pts, normals = sample_primitive(rng, name, 2000)
    assert pts.shape[1] == 3 and len(pts) > 1500 and np.allclose(np.linalg.norm(normals, axis=1), 1)
    if name == 'sphere':
        r = np.linalg.norm(pts, axis=1)
        assert np.ptp(r) < 1e-9 and np.allclose(normals * r[:, None], pts)
    elif name == 'plane':
        assert np.all(pts[:, 2] == 0)
    elif name == 'box':  # every point on a face: one coordinate at its extreme
        half = np.abs(pts).max(0)
        assert np.all(np.isclose(np.abs(pts), half).any(1))
    elif name == 'torus':  # distance to the central ring is the tube radius
        ring = np.linalg.norm(pts[:, :2], axis=1)
        big = (ring.max() + ring.min()) / 2
        tube = np.hypot(ring - big, pts[:, 2])
        assert np.ptp(tube) < 1e-6
    elif name in ('cylinder', 'cone'):
        lateral = np.abs(normals[:, 2]) < 0.999
        assert lateral.mean() > 0.3  # side and caps both sampled
    # normals point outwards (away from the centroid) for the closed shapes
    if name not in ('plane',):
        assert ((pts - pts.mean(0)) * normals).sum(1).mean() > 0


def test_partial_view_keeps_one_side():
    rng = np.random.default_rng(2)
    pts, normals = sample_primitive(rng, 'sphere', 3000)
    keep = partial_view(rng, pts, normals)
    assert 0.2 < keep.mean() < 0.8
    ds_full = PointShapesDataset(num_samples=6, partial_prob=0.0, num_points=(1000, 1000), jitter=0.0)
    ds_part = PointShapesDataset(num_samples=6, partial_prob=1.0, num_points=(1000, 1000), jitter=0.0)
    assert len(ds_part[0]['inputs']['points']) < len(ds_full[0]['inputs']['points']) == 1000


def test_pose_scale_jitter_options():
    ds = PointShapesDataset(num_samples=6, rotation='none', scale=(1, 1), jitter=0.0, partial_prob=0.0)
    pts = ds[0]['inputs']['points'].double()  # a sphere, centred on its point mean (~ its centre)
    r = pts.norm(dim=1)
    assert (r.max() - r.min()) < 0.1 * r.mean() and pts.mean(0).abs().max() < 1e-5
    plane = ds[5]['inputs']['points']
    assert plane[:, 2].abs().max() < 1e-6


def test_scenes_labels_and_ground():
    ds = DATASETS.build(dict(type='PrimitiveScenesDataset', num_samples=3, seed=4, extent=1.5))
    item = ds[1]
    pts, labels = item['inputs']['points'], item['data_samples'].gt_pts_seg.pts_semantic_mask
    assert labels.shape == (len(pts),) and labels.dtype == torch.int64
    plane = PRIMITIVES.index('plane')
    assert (labels == plane).float().mean() > 0.3 and len(torch.unique(labels)) >= 2
    objects = pts[labels != plane]
    assert objects[:, 2].min() > -0.05  # objects stand on the ground
    assert isinstance(item['data_samples'].metainfo['num_skipped_objects'], int)
    torch.testing.assert_close(ds[1]['inputs']['points'], pts)


def test_crowded_scene_reports_skipped_objects():
    ds = PrimitiveScenesDataset(num_samples=4, extent=0.8, objects=(12, 12), object_scale=(0.5, 0.6))
    assert sum(ds[i]['data_samples'].metainfo['num_skipped_objects'] for i in range(4)) > 0


@pytest.mark.parametrize('kwargs,error', [
    (dict(num_samples=-1), ValueError), (dict(split='dev'), ValueError), (dict(classes=('sphere', 'knot')), ValueError),
    (dict(rotation='x'), ValueError),
])
def test_invalid_arguments(kwargs, error):
    with pytest.raises(error):
        PointShapesDataset(**kwargs)


def test_index_out_of_range():
    with pytest.raises(IndexError, match='out of range'):
        PointShapesDataset(num_samples=3)[3]
    with pytest.raises(ValueError, match='unknown primitive'):
        sample_primitive(np.random.default_rng(0), 'knot', 10)
