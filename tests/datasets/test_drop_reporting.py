"""Nothing is dropped silently: every filter, cap, skip and rejection is counted per sample and warned once."""
import numpy as np
import pytest
import torch

from fsdlite.utils.drop_report import report_dropped
from fsdlite.datasets.gt_database import GTDatabase
from fsdlite.datasets.kitti import KittiDataset
from fsdlite.datasets.kitti_format import format_calib
from fsdlite.datasets.point_shapes import PrimitiveScenesDataset
from fsdlite.datasets.s3dis import S3DIS_CLASSES, S3DISRoomDataset
from fsdlite.registry import TRANSFORMS

CLASSES = ('Car', 'Pedestrian', 'Cyclist')


def hits(messages, *parts):
    return [m for m in messages if all(p in m for p in parts)]


def test_report_dropped_counts_always_and_warns_once_per_kind(mm_warnings):
    class Owner:
        pass

    owner = Owner()
    assert not report_dropped(owner, 'num_things', 0, 'never shown')
    assert report_dropped(owner, 'num_things', 3, lambda: 'dropped 3 of 9 things')
    assert not report_dropped(owner, 'num_things', 2, 'dropped 2 of 9 things')
    assert report_dropped(owner, 'skipped', 1, 'skipped 1 sample', in_metainfo=False)
    assert owner.dropped_totals == {'num_things': 5, 'skipped': 1}
    assert len(hits(mm_warnings, 'Owner: dropped 3 of 9 things', "metainfo['num_things']", 'shown once')) == 1
    assert not hits(mm_warnings, 'never shown') and not hits(mm_warnings, 'dropped 2 of 9')
    assert 'metainfo' not in hits(mm_warnings, 'skipped 1 sample')[0]


def test_points_range_filter_warns_once_with_counts(raw_frame, mm_warnings):
    flt = TRANSFORMS.build(dict(type='PointsRangeFilter', point_cloud_range=[0, -10, -3, 30, 10, 1]))
    first, second = raw_frame(0), raw_frame(1)
    sizes = len(first['points']), len(second['points'])
    out1, out2 = flt(first), flt(second)
    dropped = out1['num_points_filtered']
    assert dropped == sizes[0] - len(out1['points']) > 0
    found = hits(mm_warnings, f'PointsRangeFilter: dropped {dropped} of {sizes[0]} points outside point_cloud_range',
                 "metainfo['num_points_filtered']")
    assert len(found) == 1 and len(hits(mm_warnings, 'PointsRangeFilter')) == 1  # once, not per sample
    assert flt.dropped_totals['num_points_filtered'] == dropped + out2['num_points_filtered']


@pytest.mark.parametrize('cfg, why', [
    (dict(type='ObjectRangeFilter', point_cloud_range=[0, -5, -3, 20, 5, 1]), 'boxes with BEV centre outside'),
    (dict(type='ObjectNameFilter', classes=['Car']), "boxes of classes not in ('Car',)"),
    (dict(type='ObjectMinPointsFilter', min_points=10 ** 6), 'boxes with fewer than min_points=1000000'),
])
def test_object_filters_warn_with_counts(raw_frame, mm_warnings, cfg, why):
    r = raw_frame(3)
    r['gt_labels_3d'][0] = 1  # at least one non-Car box
    r['gt_bboxes_3d'][0, 0] = 60.0  # and one box far away
    boxes = len(r['gt_bboxes_3d'])
    out = TRANSFORMS.build(cfg)(r)
    dropped = out['num_objects_filtered']
    assert dropped == boxes - len(out['gt_bboxes_3d']) > 0
    assert len(hits(mm_warnings, f'{cfg["type"]}: dropped {dropped} of {boxes} {why}',
                    "metainfo['num_objects_filtered']")) == 1


def test_load_points_from_file_reports_non_finite_rows(tmp_path, mm_warnings):
    points = np.arange(20, dtype=np.float32).reshape(5, 4)
    points[1, 3], points[3, 0] = np.nan, np.inf
    points.tofile(tmp_path / 'frame.bin')
    load = TRANSFORMS.build(dict(type='LoadPointsFromFile'))
    out = load(dict(lidar_path=str(tmp_path / 'frame.bin'), sample_idx=4))
    assert out['points'].shape == (3, 4) and out['num_points_invalid'] == 2
    assert len(hits(mm_warnings, 'LoadPointsFromFile: dropped 2 of 5 points with NaN/Inf values',
                    'sample_idx=4', "metainfo['num_points_invalid']")) == 1


def test_kitti_reports_non_finite_points(tmp_path, mm_warnings):
    root = tmp_path / 'kitti'
    for sub in ('velodyne', 'calib'):
        (root / 'training' / sub).mkdir(parents=True)
    points = np.ones((6, 4), np.float32)
    points[2, 1] = np.nan
    points.tofile(root / 'training' / 'velodyne' / '000001.bin')
    (root / 'training' / 'calib' / '000001.txt').write_text(format_calib(dict(R0_rect=np.eye(4),
                                                                             Tr_velo_to_cam=np.eye(4))))
    ds = KittiDataset(data_root=str(root), test_mode=True, pipeline=[dict(type='Pack3DDetInputs')])
    item = ds[0]
    assert item['inputs']['points'].shape == (5, 4)
    assert item['data_samples'].metainfo['num_points_invalid'] == 1
    assert len(hits(mm_warnings, 'KittiDataset: dropped 1 of 6 points with NaN/Inf values', '000001')) == 1
    assert ds.dropped_totals['num_points_invalid'] == 1


def test_skipped_samples_are_counted(synthetic_dataset, mm_warnings):
    nones = []

    def skip_first(results):
        if results['sample_idx'] == 0:
            nones.append(0)
            return None
        return results

    ds = synthetic_dataset(pipeline=[skip_first])
    assert ds.prepare_data(0) is None and ds.prepare_data(1) is not None
    assert ds[0]['sample_idx'] != 0  # mmengine drew another sample in its place
    assert ds.dropped_totals['skipped_samples'] == len(nones) >= 2
    assert len(hits(mm_warnings, 'SyntheticLidarDataset: skipped sample 0: the pipeline returned None')) == 1


def test_synthetic_scene_reports_skipped_objects(synthetic_dataset, mm_warnings):
    crowd = dict(street_types=dict(narrow=1.0), traffic=dict(pedestrians=(80, 80)))  # more than the sidewalks hold
    ds = synthetic_dataset(num_frames=1, scene=crowd, pipeline=[dict(type='Pack3DDetInputs')])
    skipped = ds[0]['data_samples'].metainfo['num_skipped_objects']
    assert skipped > 0 and ds.dropped_totals['num_skipped_objects'] == skipped
    assert len(hits(mm_warnings, f'SyntheticLidarDataset: {skipped} road users', 'found no free spot',
                    "metainfo['num_skipped_objects']")) == 1


def test_primitive_scenes_report_skipped_objects(mm_warnings):
    ds = PrimitiveScenesDataset(num_samples=4, extent=0.8, objects=(12, 12), object_scale=(0.5, 0.6),
                                point_density=50.0)
    skipped = [ds[i]['data_samples'].metainfo['num_skipped_objects'] for i in range(4)]
    assert sum(skipped) > 0 and ds.dropped_totals['num_skipped_objects'] == sum(skipped)
    first = next(i for i, s in enumerate(skipped) if s)
    assert len(hits(mm_warnings, f'PrimitiveScenesDataset: {skipped[first]} objects of scene {first}',
                    'no free spot')) == 1


def test_s3dis_region_cap_is_reported(tmp_path, mm_warnings):
    rng = np.random.default_rng(0)
    path = tmp_path / 'room.npz'
    np.savez(path, xyz=rng.uniform(0, 1, (300, 3)).astype(np.float32), rgb=np.zeros((300, 3), np.uint8),
             sem_label=np.zeros(300, np.int64), class_names=np.array(S3DIS_CLASSES))
    ds = S3DISRoomDataset(path, num_samples=2, sphere_radius=5.0, max_points=100)
    item = ds[0]
    assert len(item['inputs']['points']) == 100 and item['data_samples'].metainfo['num_dropped_points'] == 200
    assert len(hits(mm_warnings, 'S3DISRoomDataset: dropped 200 of 300 points of sample 0', 'max_points=100',
                    "metainfo['num_dropped_points']")) == 1
    ds[1]
    assert ds.dropped_totals['num_dropped_points'] == 400 and len(hits(mm_warnings, 'S3DISRoomDataset')) == 1


@pytest.fixture
def tiny_database(tmp_path):
    """Three cars: 0 and 1 overlap each other, 2 has a single point (below min_points=2)."""
    boxes = torch.tensor([[10.0, 0.0, -1.7, 4.0, 2.0, 1.5, 0.0], [10.0, 1.0, -1.7, 4.0, 2.0, 1.5, 0.0],
                          [20.0, 5.0, -1.7, 4.0, 2.0, 1.5, 0.0]])
    obj = torch.tensor([[0.0, 0.0, 0.5, 0.3], [0.5, 0.2, 0.7, 0.3], [-0.5, -0.2, 0.3, 0.3]])
    db = GTDatabase(torch.cat([obj, obj, obj[:1]]), torch.tensor([0, 3, 6, 7]), boxes, torch.zeros(3, dtype=torch.long),
                    torch.zeros(3, dtype=torch.long), CLASSES)
    db.save(tmp_path / 'db.npz')
    return tmp_path / 'db.npz'


def scene():
    points = torch.tensor([[10.0, 0.5, -1.0, 0.1], [30.0, 0.0, -1.0, 0.1], [40.0, 9.0, -1.0, 0.1]])
    return dict(points=points, gt_bboxes_3d=torch.tensor([[30.0, 0.0, -1.7, 4.0, 2.0, 1.5, 0.0]]),
                gt_labels_3d=torch.tensor([0]), pts_semantic_mask=torch.tensor([3, 0, 3]),
                pts_instance_mask=torch.tensor([-1, 0, -1]), num_points_in_gt=torch.tensor([1]), classes=CLASSES,
                sample_idx=5)


def test_object_sample_counts_rejected_unavailable_and_replaced(tiny_database, mm_warnings):
    sample = TRANSFORMS.build(dict(type='ObjectSample', db_path=str(tiny_database), sample_groups=dict(Car=3),
                                   min_points=2))
    assert len(hits(mm_warnings, 'ObjectSample: 1 of 3 objects', 'fewer than min_points', 'never drawn')) == 1
    np.random.seed(0)
    out = TRANSFORMS.build(dict(type='Pack3DDetInputs'))(sample(scene()))
    meta = out['data_samples'].metainfo
    assert (meta['num_sampled_objects'], meta['num_rejected_objects'], meta['num_unavailable_objects'],
            meta['num_points_replaced']) == (1, 1, 1, 1)
    assert len(out['inputs']['points']) == 3 - 1 + 3
    for text, key in (('dropped 1 of 2 drawn objects: their BEV footprint', 'num_rejected_objects'),
                      ('dropped 1 of 3 requested objects: the database pools are too small', 'num_unavailable_objects'),
                      ('dropped 1 of 3 scene points: they lie inside pasted objects', 'num_points_replaced')):
        assert len(hits(mm_warnings, f'ObjectSample: {text}', f"metainfo['{key}']")) == 1, text
    assert sample.dropped_totals['num_rejected_objects'] == 1


def test_pack_keeps_drop_counters_with_custom_meta_keys(raw_frame):
    r = TRANSFORMS.build(dict(type='PointsRangeFilter', point_cloud_range=[0, -10, -3, 30, 10, 1]))(raw_frame(0))
    meta = TRANSFORMS.build(dict(type='Pack3DDetInputs', meta_keys=('sample_idx',)))(r)['data_samples'].metainfo
    assert meta['num_points_filtered'] == r['num_points_filtered'] > 0 and meta['sample_idx'] == 0
