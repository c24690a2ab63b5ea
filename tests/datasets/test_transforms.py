"""Lidar transforms: filters count what they drop, augmentations move points and boxes together."""
import math

import numpy as np
import pytest
import torch

from fsdlite.ops import count_points_in_boxes, points_in_boxes
from fsdlite.registry import TRANSFORMS
from fsdlite.structures import Det3DDataSample

RANGE = [0, -40, -3, 70.4, 40, 1]


def build(cfg):
    return TRANSFORMS.build(cfg)


def assert_masks_aligned(results):
    """Every per-point mask has one row per point and instance rows index existing boxes."""
    n, m = len(results['points']), len(results['gt_bboxes_3d'])
    inst = results['pts_instance_mask']
    assert results['pts_semantic_mask'].shape == (n,) and inst.shape == (n,)
    assert len(inst) == 0 or int(inst.max()) < m
    on = inst >= 0
    assert torch.equal(results['pts_semantic_mask'][on], results['gt_labels_3d'][inst[on]])
    assert len(results['gt_labels_3d']) == m == len(results['num_points_in_gt'])


def test_points_range_filter_counts_and_keeps_masks(raw_frame):
    r = raw_frame(0)
    r['points'][:3, 0] = torch.tensor([-1.0, 100.0, float('nan')])  # outside / non-finite
    n = len(r['points'])
    out = build(dict(type='PointsRangeFilter', point_cloud_range=[0, -10, -3, 30, 10, 1]))(r)
    kept = out['points']
    assert ((kept[:, 0] > 0) & (kept[:, 0] < 30) & (kept[:, 1].abs() < 10)).all()
    assert out['num_points_filtered'] == n - len(kept) > 3
    assert_masks_aligned(out)


def test_object_range_filter_drops_counts_and_relabels(raw_frame):
    r = raw_frame(1)
    boxes = r['gt_bboxes_3d']
    in_range = (boxes[:, 0] > RANGE[0]) & (boxes[:, 0] < RANGE[3]) & (boxes[:, 1] > RANGE[1]) & (boxes[:, 1] < RANGE[4])
    first, second = torch.nonzero(in_range).flatten()[:2].tolist()
    boxes[first, 0] = 80.0   # move a box out of range (its points keep their positions)
    boxes[second, 6] = 7.0   # an unwrapped yaw
    kept = int(in_range.sum()) - 1
    background = int((r['pts_semantic_mask'] == 3).sum())
    points_of_first = int((r['pts_instance_mask'] == first).sum())
    points_outside = int(r['num_points_in_gt'][~in_range].sum()) if (~in_range).any() else 0
    assert points_of_first > 0
    out = build(dict(type='ObjectRangeFilter', point_cloud_range=RANGE))(r)
    assert len(out['gt_bboxes_3d']) == kept and out['num_objects_filtered'] == len(boxes) - kept
    assert math.isclose(float(out['gt_bboxes_3d'][second - 1 - int((~in_range[:second]).sum()), 6]),
                        7.0 - 2 * math.pi, rel_tol=1e-6)
    assert ((out['gt_bboxes_3d'][:, 6] >= -math.pi) & (out['gt_bboxes_3d'][:, 6] < math.pi)).all()
    assert_masks_aligned(out)
    # the dropped boxes' points are background now
    assert int((out['pts_semantic_mask'] == 3).sum()) == background + points_of_first + points_outside


def test_object_name_filter(raw_frame):
    r = raw_frame(2)
    labels = r['gt_labels_3d'].clone()
    out = build(dict(type='ObjectNameFilter', classes=['Car']))(r)
    assert (out['gt_labels_3d'] == 0).all() and len(out['gt_labels_3d']) == int((labels == 0).sum())
    assert out['num_objects_filtered'] == int((labels != 0).sum())
    assert set(out['pts_semantic_mask'].unique().tolist()) <= {0, 3}
    assert_masks_aligned(out)
    with pytest.raises(ValueError, match="classes \\['Truck'\\] are not classes"):
        build(dict(type='ObjectNameFilter', classes=['Truck']))(raw_frame(2))
    with pytest.raises(TypeError, match='sequence of class names'):
        build(dict(type='ObjectNameFilter', classes='Car'))


def test_object_min_points_filter(raw_frame):
    r = raw_frame(3)
    counts = count_points_in_boxes(r['points'], r['gt_bboxes_3d'])
    out = build(dict(type='ObjectMinPointsFilter', min_points=10))(r)
    assert len(out['gt_bboxes_3d']) == int((counts >= 10).sum())
    assert out['num_objects_filtered'] == int((counts < 10).sum())
    assert (count_points_in_boxes(out['points'], out['gt_bboxes_3d']) >= 10).all()
    assert_masks_aligned(out)


@pytest.mark.parametrize('cfg', [
    dict(type='GlobalRotScaleTrans', rot_range=[-3.14, 3.14], scale_ratio_range=[0.8, 1.2],
         translation_std=[0.5, 0.5, 0.2]),
    dict(type='RandomFlip3D', flip_ratio_bev_horizontal=1.0),
    dict(type='RandomFlip3D', flip_ratio_bev_horizontal=1.0, flip_ratio_bev_vertical=1.0),
])
def test_augmentations_keep_points_in_their_boxes(raw_frame, cfg):
    np.random.seed(3)
    r = raw_frame(0)
    before_idx = points_in_boxes(r['points'], r['gt_bboxes_3d'])
    before_counts = count_points_in_boxes(r['points'], r['gt_bboxes_3d'])
    intensity = r['points'][:, 3].clone()
    out = build(cfg)(r)
    assert torch.equal(points_in_boxes(out['points'], out['gt_bboxes_3d']), before_idx)
    assert torch.equal(count_points_in_boxes(out['points'], out['gt_bboxes_3d']), before_counts)
    assert torch.equal(out['points'][:, 3], intensity)
    assert len(out['transformation_3d_flow']) >= 1


def test_rotation_records_and_geometry(raw_frame):
    np.random.seed(0)
    r = raw_frame(0)
    pts = r['points'].clone()
    out = build(dict(type='GlobalRotScaleTrans', rot_range=[0.5, 0.5], scale_ratio_range=[2.0, 2.0]))(r)
    assert out['pcd_rotation_angle'] == 0.5 and out['pcd_scale_factor'] == 2.0 and out['pcd_trans'] == [0, 0, 0]
    c, s = math.cos(0.5), math.sin(0.5)
    expected_x = 2 * (pts[:, 0] * c - pts[:, 1] * s)
    assert torch.allclose(out['points'][:, 0], expected_x, atol=1e-4)
    assert out['transformation_3d_flow'] == ['R', 'S', 'T']


def test_flip_records(raw_frame):
    np.random.seed(0)
    r = raw_frame(0)
    y = r['points'][:, 1].clone()
    out = build(dict(type='RandomFlip3D', flip_ratio_bev_horizontal=1.0))(r)
    assert out['pcd_horizontal_flip'] is True and out['pcd_vertical_flip'] is False
    assert torch.equal(out['points'][:, 1], -y)
    unflipped = build(dict(type='RandomFlip3D', flip_ratio_bev_horizontal=0.0))(raw_frame(0))
    assert unflipped['pcd_horizontal_flip'] is False and 'transformation_3d_flow' not in unflipped


def test_point_shuffle_permutes_points_with_masks(raw_frame):
    np.random.seed(1)
    r = raw_frame(1)
    rows = {tuple(p.tolist()) + (int(s), int(i)) for p, s, i in
            zip(r['points'], r['pts_semantic_mask'], r['pts_instance_mask'])}
    order = r['points'].clone()
    out = build(dict(type='PointShuffle'))(r)
    assert not torch.equal(out['points'], order)
    assert rows == {tuple(p.tolist()) + (int(s), int(i)) for p, s, i in
                    zip(out['points'], out['pts_semantic_mask'], out['pts_instance_mask'])}


def test_pack_inputs_contract(raw_frame):
    r = raw_frame(0)
    r['pcd_rotation_angle'] = 0.1
    packed = build(dict(type='Pack3DDetInputs'))(r)
    sample = packed['data_samples']
    assert isinstance(sample, Det3DDataSample) and torch.equal(packed['inputs']['points'], r['points'])
    assert torch.equal(sample.gt_instances_3d.bboxes_3d, r['gt_bboxes_3d'])
    assert torch.equal(sample.gt_pts_seg.pts_semantic_mask, r['pts_semantic_mask'])
    assert sample.metainfo['num_points_in_gt'] == r['num_points_in_gt'].tolist()
    assert sample.metainfo['pcd_rotation_angle'] == 0.1 and sample.metainfo['classes'] == r['classes']
    bare = build(dict(type='Pack3DDetInputs', keys=['points']))(dict(points=torch.zeros(5, 4)))
    assert bare['data_samples'].gt_instances_3d.bboxes_3d.shape == (0, 7)
    assert 'pts_semantic_mask' not in bare['data_samples'].gt_pts_seg
    with pytest.raises(ValueError, match='must include "points"'):
        build(dict(type='Pack3DDetInputs', keys=['gt_bboxes_3d']))


def test_load_points_from_file(tmp_path):
    pts = np.arange(40, dtype=np.float32).reshape(8, 5)
    pts[2, 1] = np.nan
    path = tmp_path / 'frame.bin'
    pts.tofile(path)
    out = build(dict(type='LoadPointsFromFile', load_dim=5, use_dim=[0, 1, 2, 4]))(dict(lidar_path=str(path)))
    assert out['points'].shape == (7, 4) and out['num_points_invalid'] == 1
    assert out['points'][0].tolist() == [0, 1, 2, 4]
    with pytest.raises(ValueError, match='holds 160 bytes, not a whole number of 12-byte points'):
        build(dict(type='LoadPointsFromFile', load_dim=3, use_dim=3))(dict(lidar_path=str(path)))
    with pytest.raises(FileNotFoundError, match='does not exist'):
        build(dict(type='LoadPointsFromFile'))(dict(lidar_path=str(tmp_path / 'missing.bin')))
    with pytest.raises(ValueError, match='use_dim'):
        build(dict(type='LoadPointsFromFile', load_dim=4, use_dim=[0, 1, 7]))(dict(lidar_path=str(path)))


@pytest.mark.parametrize('size, match', [
    (0, r"is empty \(0 bytes\); expected 16 bytes per point"),  # trained a labelled frame on nothing (loss 0)
    (16 * 1024 + 2, r'holds 16386 bytes, not a whole number of 16-byte points \(4 float32 values: 1024 points and 2 '
                    r'bytes left over\)'),  # loaded silently, the 2 bytes ignored
    (16 * 1024 + 4, r'1024 points and 4 bytes left over'),
])
def test_load_points_refuses_empty_and_truncated_files(tmp_path, size, match):
    from fsdlite.datasets.transforms.loading import load_points
    from fsdlite.utils.errors import DataError
    path = tmp_path / 'frame.bin'
    path.write_bytes(bytes(size))
    with pytest.raises(DataError, match=match):
        load_points(path)
    assert load_points(_write(tmp_path / 'ok.bin', 16 * 1024)).shape == (1024, 4)


def _write(path, size):
    path.write_bytes(bytes(size))
    return path


@pytest.mark.parametrize('cfg,error,match', [
    (dict(type='PointsRangeFilter', point_cloud_range=[0, 0, 0, 1, 1]), ValueError, 'point_cloud_range'),
    (dict(type='ObjectRangeFilter', point_cloud_range=[5, 0, 0, 1, 1, 1]), ValueError, 'min < max'),
    (dict(type='GlobalRotScaleTrans', scale_ratio_range=[0, 1]), ValueError, 'scale_ratio_range'),
    (dict(type='GlobalRotScaleTrans', rot_range=[1, -1]), ValueError, 'rot_range'),
    (dict(type='GlobalRotScaleTrans', translation_std=[1, 1]), ValueError, 'translation_std'),
    (dict(type='RandomFlip3D', flip_ratio_bev_horizontal=1.5), ValueError, 'flip_ratio_bev_horizontal'),
    (dict(type='ObjectMinPointsFilter', min_points=-2), ValueError, 'min_points'),
    (dict(type='PointRangeFilter', point_cloud_range=RANGE), KeyError, "Did you mean: 'PointsRangeFilter'"),
])
def test_invalid_transform_configs(cfg, error, match):
    with pytest.raises(error, match=match):
        build(cfg)
