"""SyntheticLidarDataset: the dataset contract, determinism, label consistency, scene options."""
import numpy as np
import pytest
import torch

from fsdlite.datasets.synthetic_lidar import SyntheticLidarDataset
from fsdlite.datasets.synthetic_scene import SceneSpec, frame_rng, sample_layout
from fsdlite.ops import count_points_in_boxes, points_in_boxes
from fsdlite.structures import Det3DDataSample
from fsdlite.structures.boxes import bev_overlap


def test_contract_of_packed_samples(synthetic_dataset):
    ds = synthetic_dataset(pipeline=[dict(type='Pack3DDetInputs')])
    assert isinstance(ds, SyntheticLidarDataset) and len(ds) == 4
    assert ds.metainfo['classes'] == ('Car', 'Pedestrian', 'Cyclist')
    item = ds[1]
    assert set(item) == {'inputs', 'data_samples'}
    points, sample = item['inputs']['points'], item['data_samples']
    assert isinstance(sample, Det3DDataSample)
    assert points.dtype == torch.float32 and points.dim() == 2 and points.shape[1] == 4 and len(points) > 500
    gt = sample.gt_instances_3d
    assert gt.bboxes_3d.dtype == torch.float32 and gt.bboxes_3d.shape[1] == 7
    assert gt.labels_3d.dtype == torch.long and len(gt.labels_3d) == len(gt.bboxes_3d) >= 3
    assert set(gt.labels_3d.tolist()) <= {0, 1, 2}
    mask = sample.gt_pts_seg.pts_semantic_mask
    assert mask.dtype == torch.long and mask.shape == (len(points),) and set(mask.tolist()) <= {0, 1, 2, 3}
    meta = sample.metainfo
    assert meta['sample_idx'] == 1 and meta['num_points_filtered'] == 0 and meta['num_classes'] == 3
    assert meta['num_points_in_gt'] == count_points_in_boxes(points, gt.bboxes_3d).tolist()
    assert ((points[:, 3] >= 0) & (points[:, 3] <= 1)).all()


def test_deterministic_and_split_disjoint(synthetic_dataset):
    a, b = synthetic_dataset(), synthetic_dataset()
    assert torch.equal(a.raw_results(2)['points'], b.raw_results(2)['points'])
    assert not torch.equal(a.raw_results(2)['gt_bboxes_3d'], a.raw_results(3)['gt_bboxes_3d'])
    val = synthetic_dataset(split='val')
    assert not torch.equal(a.raw_results(0)['gt_bboxes_3d'], val.raw_results(0)['gt_bboxes_3d'])
    other_seed = synthetic_dataset(seed=1)
    assert not torch.equal(a.raw_results(0)['gt_bboxes_3d'], other_seed.raw_results(0)['gt_bboxes_3d'])
    # a frame does not depend on which frames were read before it (or on a subset via indices)
    subset = synthetic_dataset(indices=[3])
    assert torch.equal(subset.raw_results(0)['points'], a.raw_results(3)['points'])
    cached = synthetic_dataset(cache=True)
    first = cached.raw_results(1)
    for value in first.values():  # editing a returned sample (every tensor in it) must not corrupt the cache
        if isinstance(value, torch.Tensor) and value.numel():
            value.view(-1)[0] = -7
    again, fresh = cached.raw_results(1), a.raw_results(1)
    for key, value in fresh.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(again[key], value), key


def test_labels_agree_with_boxes(raw_frame):
    for index in range(3):
        r = raw_frame(index)
        inst, sem = r['pts_instance_mask'], r['pts_semantic_mask']
        boxes, labels = r['gt_bboxes_3d'], r['gt_labels_3d']
        on_object = inst >= 0
        assert torch.equal(sem[on_object], labels[inst[on_object]])
        assert (sem[~on_object] == 3).all()
        # hits on an object lie in (or within range noise of) its box
        inside = points_in_boxes(r['points'], boxes)
        agree = (inside[on_object] == inst[on_object]).float().mean()
        assert agree > 0.98, float(agree)
        assert torch.equal(r['num_points_in_gt'], count_points_in_boxes(r['points'], boxes))
        # objects stand on the ground and never overlap in BEV
        assert torch.allclose(boxes[:, 2], torch.full_like(boxes[:, 2], -1.73))
        overlap = bev_overlap(boxes, boxes) & ~torch.eye(len(boxes), dtype=torch.bool)
        assert not overlap.any()


def test_noise_free_ground_points_lie_on_the_ground(synthetic_dataset):
    clean = synthetic_dataset(noise=dict(range_noise=0.0, dropout=0.0, intensity_noise=0.0)).raw_results(0)
    noisy = synthetic_dataset().raw_results(0)
    on_ground = (clean['points'][:, 2] + 1.73).abs() < 1e-5
    assert on_ground.float().mean() > 0.3
    assert ((noisy['points'][:, 2] + 1.73).abs() < 1e-5).float().mean() < 0.05  # range noise moves them
    assert len(noisy['points']) < len(clean['points'])  # dropout


def test_default_demo_frames_are_moderate():
    """The demo configuration (32 beams, 0.2 deg, front 90 deg) gives ~5-15k points per frame."""
    ds = SyntheticLidarDataset(num_frames=2, lidar=dict(num_beams=32, azimuth_resolution=0.2))
    sizes = [len(ds.raw_results(i)['points']) for i in range(2)]
    assert all(5000 <= n <= 15000 for n in sizes), sizes
    stats = ds.statistics()
    assert stats['frames'] == 2 and sum(stats['boxes_per_class'].values()) >= 6


def test_layout_respects_counts_fov_and_ego_lane():
    from fsdlite.datasets.raycast import LidarSpec
    lidar = LidarSpec(horizontal_fov=(-45, 45))
    scene = SceneSpec(counts=dict(Car=(6, 6), Pedestrian=(2, 2), Cyclist=(0, 0)), walls=(2, 2))
    for index in range(5):
        layout = sample_layout(frame_rng(0, 0, index), scene, lidar)
        m = layout['num_objects']
        labels = layout['labels']
        assert m + layout['num_skipped'] >= 8 and (labels[:m] < 3).all() and (labels[m:] == 3).all()
        centres = layout['boxes'][:m, :2]
        az = np.degrees(np.arctan2(centres[:, 1], centres[:, 0]))
        assert (np.abs(az) <= 45).all()
        dist = np.hypot(centres[:, 0], centres[:, 1])
        assert ((dist >= 5) & (dist <= 55)).all()
        ego_lane = (layout['boxes'][:, 0] < 7.5) & (np.abs(layout['boxes'][:, 1]) < 1.2)
        assert not ego_lane.any()


def test_scene_and_class_options(synthetic_dataset):
    only_cars = synthetic_dataset(metainfo=dict(classes=('Car',)), scene=dict(counts=dict(Car=(2, 3))))
    r = only_cars.raw_results(0)
    assert only_cars.classes == ('Car',) and set(r['gt_labels_3d'].tolist()) == {0}
    assert 2 <= len(r['gt_labels_3d']) <= 3 and set(r['pts_semantic_mask'].tolist()) <= {0, 1}
    sweep = synthetic_dataset(lidar=dict(num_beams=8, azimuth_resolution=2.0, horizontal_fov=(-180, 180),
                                         vertical_fov='symmetric25'), noise=dict(dropout=0.0))
    pts = sweep.raw_results(0)['points']
    assert (pts[:, 0] < 0).any() and (pts[:, 0] > 0).any()


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(split='training'), ValueError, "split must be one of"),
    (dict(num_frames=-1), ValueError, 'num_frames must be an int >= 0'),
    (dict(lidar=dict(beams=32)), TypeError, 'bad lidar options'),
    (dict(lidar=dict(num_beams=0)), ValueError, 'num_beams'),
    (dict(noise=dict(dropout=1.5)), ValueError, 'dropout'),
    (dict(scene=dict(cars=3)), TypeError, 'unknown scene options'),
    (dict(metainfo=dict(classes=('Car', 'Van'))), ValueError, r"classes \['Van'\] need entries"),
])
def test_invalid_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        SyntheticLidarDataset(**kwargs)


def test_rays_are_only_cast_where_a_box_can_be_hit():
    """Hundreds of frames in seconds: each box is intersected with the azimuth columns it spans only."""
    from fsdlite.datasets.raycast import LidarSpec, _columns_covering
    azimuths = LidarSpec(num_beams=32, azimuth_resolution=0.2).azimuths
    car_at_20m = np.array([20.0, 3.0, -1.73, 3.9, 1.6, 1.56, 0.3])
    cols = _columns_covering(azimuths, car_at_20m)
    assert 0 < len(cols) < 0.15 * len(azimuths)
    assert np.all(np.diff(cols) == 1), 'a box spans one contiguous run of columns'
