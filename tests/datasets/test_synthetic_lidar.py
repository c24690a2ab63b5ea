"""SyntheticLidarDataset: the dataset contract, determinism, label consistency, KITTI-style labels, options."""
import numpy as np
import pytest
import torch

from fsdlite.datasets.synthetic_lidar import SyntheticLidarDataset
from fsdlite.ops import count_points_in_boxes, points_in_boxes
from fsdlite.structures import Det3DDataSample
from fsdlite.structures.boxes import bev_overlap
from fsdlite.structures.camera import KITTI_IMAGE_SIZE, camera_fov_mask

KITTI_TYPES = {'Car', 'Van', 'Truck', 'Tram', 'Misc', 'Pedestrian', 'Cyclist'}


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
    assert gt.labels_3d.dtype == torch.long and len(gt.labels_3d) == len(gt.bboxes_3d) >= 1
    assert set(gt.labels_3d.tolist()) <= {0, 1, 2}
    mask = sample.gt_pts_seg.pts_semantic_mask
    assert mask.dtype == torch.long and mask.shape == (len(points),) and set(mask.tolist()) <= {0, 1, 2, 3}
    meta = sample.metainfo
    assert meta['sample_idx'] == 1 and meta['num_points_filtered'] == 0 and meta['num_classes'] == 3
    assert meta['num_points_in_gt'] == count_points_in_boxes(points, gt.bboxes_3d).tolist()
    assert ((points[:, 3] >= 0) & (points[:, 3] <= 1)).all()
    assert set(meta['kitti_annos']) >= {'name', 'box_lidar', 'bbox', 'truncated', 'occluded'}
    assert meta['lidar2img'].shape == (4, 4) and meta['street'] in ('urban', 'residential', 'road', 'narrow')


def test_deterministic_and_split_disjoint(synthetic_dataset):
    a, b = synthetic_dataset(), synthetic_dataset()
    assert torch.equal(a.raw_results(2)['points'], b.raw_results(2)['points'])
    assert not torch.equal(a.raw_results(2)['points'][:100], a.raw_results(3)['points'][:100])
    val = synthetic_dataset(split='val')
    assert not torch.equal(a.raw_results(0)['points'][:100], val.raw_results(0)['points'][:100])
    other_seed = synthetic_dataset(seed=1)
    assert not torch.equal(a.raw_results(0)['points'][:100], other_seed.raw_results(0)['points'][:100])
    # a frame does not depend on which frames were read before it (or on a subset via indices)
    subset = synthetic_dataset(indices=[3])
    assert torch.equal(subset.raw_results(0)['points'], a.raw_results(3)['points'])
    cached = synthetic_dataset(cache=True)
    first = cached.raw_results(1)
    for value in first.values():  # editing a returned sample (every tensor in it) must not corrupt the cache
        if isinstance(value, torch.Tensor) and value.numel():
            value.view(-1)[0] = -7
    first['kitti_annos']['box_lidar'][:] = -7
    again, fresh = cached.raw_results(1), a.raw_results(1)
    for key, value in fresh.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(again[key], value), key
    assert np.array_equal(again['kitti_annos']['box_lidar'], fresh['kitti_annos']['box_lidar'])


def test_labels_agree_with_boxes(raw_frame):
    agree, total = 0, 0
    for index in range(4):
        r = raw_frame(index)
        inst, sem = r['pts_instance_mask'], r['pts_semantic_mask']
        boxes, labels = r['gt_bboxes_3d'], r['gt_labels_3d']
        on_object = inst >= 0
        assert torch.equal(sem[on_object], labels[inst[on_object]])
        assert (sem[~on_object] == 3).all()
        # returns from a road user lie in its box or within range noise of it (5 cm, over 3 sigma): door mirrors
        # (8-18 cm out) stay outside, as on KITTI's labels
        grown = boxes.clone()
        grown[:, 3:6] += 0.1
        grown[:, 2] -= 0.05
        inside = points_in_boxes(r['points'], grown)
        agree += int((inside[on_object] == inst[on_object]).sum())
        total += int(on_object.sum())
        assert torch.equal(r['num_points_in_gt'], count_points_in_boxes(r['points'], boxes))
        assert (r['num_points_in_gt'] > 0).all()  # only road users that returned points are labelled
        overlap = bev_overlap(boxes, boxes) & ~torch.eye(len(boxes), dtype=torch.bool)
        assert not overlap.any()
    assert agree > 0.97 * total, (agree, total)


def test_kitti_style_labels(raw_frame):
    names = set()
    for index in range(6):
        r = raw_frame(index)
        annos = r['kitti_annos']
        names |= set(annos['name'])
        assert set(annos['name']) <= KITTI_TYPES
        assert (annos['num_points'] > 0).all() and set(annos['occluded'].tolist()) <= {0, 1, 2}
        assert ((annos['truncated'] >= 0) & (annos['truncated'] <= 1)).all()
        bbox = annos['bbox']
        assert ((bbox[:, 0] >= 0) & (bbox[:, 2] <= KITTI_IMAGE_SIZE[0]) & (bbox[:, 0] <= bbox[:, 2])).all()
        targets = np.isin(annos['name'], ['Car', 'Pedestrian', 'Cyclist'])
        assert np.allclose(annos['box_lidar'][targets], r['gt_bboxes_3d'].numpy(), atol=1e-5)
        assert camera_fov_mask(r['points'], r['lidar2img']).all()  # every point is in the camera's view
    assert {'Car', 'Pedestrian'} <= names


def test_default_frames_look_like_kitti_scans():
    """The configs' sensor (HDL-64E, 0.18 deg, camera view) gives 12-21k points per frame (KITTI: ~19k)."""
    ds = SyntheticLidarDataset(num_frames=2)
    sizes = [len(ds.raw_results(i)['points']) for i in range(2)]
    assert all(12000 <= n <= 21000 for n in sizes), sizes
    stats = ds.statistics()
    assert stats['frames'] == 2 and stats['boxes_per_class']['Car'] >= 2


def test_noise_options_change_the_points(synthetic_dataset):
    clean = synthetic_dataset(noise=dict(range_noise=0.0, dropout=0.0)).raw_results(0)['points']
    noisy = synthetic_dataset(noise=dict(range_noise=0.05, dropout=0.3)).raw_results(0)['points']
    assert len(noisy) < 0.85 * len(clean)


def test_scene_and_class_options(synthetic_dataset):
    only_cars = synthetic_dataset(metainfo=dict(classes=('Car',)))
    r = only_cars.raw_results(0)
    assert only_cars.classes == ('Car',) and set(r['gt_labels_3d'].tolist()) <= {0}
    assert set(r['pts_semantic_mask'].tolist()) <= {0, 1}
    vans = synthetic_dataset(metainfo=dict(classes=('Car', 'Van')), scene=dict(traffic=dict(vehicle_mix=dict(Van=1.0))))
    labels = torch.cat([vans.raw_results(i)['gt_labels_3d'] for i in range(3)])
    assert (labels == 1).any() and not (labels == 0).any()
    roads = synthetic_dataset(scene=dict(street_types=dict(road=1.0)))
    assert {roads.raw_results(i)['street'] for i in range(2)} == {'road'}
    sweep = synthetic_dataset(lidar=dict(num_beams=8, azimuth_resolution=2.0, horizontal_fov=(-180, 180),
                                         camera_fov=False), noise=dict(dropout=0.0))
    pts = sweep.raw_results(0)['points']
    assert (pts[:, 0] < 0).any() and (pts[:, 0] > 0).any()


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(split='training'), ValueError, "split must be one of"),
    (dict(num_frames=-1), ValueError, 'num_frames must be an int >= 0'),
    (dict(lidar=dict(beams=32)), TypeError, 'bad lidar options'),
    (dict(lidar=dict(num_beams=0)), ValueError, 'num_beams'),
    (dict(lidar=dict(num_beams=65)), ValueError, 'num_beams'),
    (dict(noise=dict(dropout=1.5)), ValueError, 'dropout'),
    (dict(scene=dict(cars=3)), TypeError, 'bad scene options'),
    (dict(scene=dict(street_types=dict(motorway=1.0))), ValueError, 'street_types'),
    (dict(scene=dict(traffic=dict(pedestrians=(3, 1)))), ValueError, 'pedestrians'),
    (dict(metainfo=dict(classes=('Car', 'Bus'))), ValueError, r"classes \['Bus'\]"),
])
def test_invalid_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        SyntheticLidarDataset(**kwargs)
