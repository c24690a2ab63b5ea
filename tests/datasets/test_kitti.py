"""KittiDataset on the real frame 000008 (info .pkl and a standard-layout copy written here)."""
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from fsdlite.datasets.kitti import KittiDataset
from fsdlite.datasets.kitti_format import (format_calib, format_label, lidar2cam_from_calib, read_calib,
                                           read_info_pkl, read_label)

KITTI_COUNTS = [1325, 1900, 881, 659, 55, 162]


def info_dataset(folder, **kwargs):
    return KittiDataset(data_root=str(folder), ann_file='000008.pkl', data_prefix=dict(pts=''), **kwargs)


def write_standard_layout(kitti_folder, root, frame_ids=('000008',), extra_objects=()):
    """Write training/{velodyne,label_2,calib} for frame 000008 from the mmdet3d info .pkl."""
    info = pickle.load(open(kitti_folder / '000008.pkl', 'rb'))['data_list'][0]
    names = {2: 'Car', -1: 'DontCare'}
    objects = [dict(name=names[ins['bbox_label_3d']], truncated=ins['truncated'], occluded=ins['occluded'],
                    alpha=ins['alpha'], bbox=ins['bbox'], box_camera=ins['bbox_3d']) for ins in info['instances']]
    objects += list(extra_objects)
    calib = {f'P{i}': np.array(info['images'][f'CAM{i}']['cam2img']) for i in range(4)}
    calib.update(R0_rect=np.array(info['images']['R0_rect']), Tr_velo_to_cam=np.array(info['lidar_points'][
        'Tr_velo_to_cam']), Tr_imu_to_velo=np.array(info['lidar_points']['Tr_imu_to_velo']))
    points = np.fromfile(kitti_folder / '000008.bin', np.float32)
    for sub in ('velodyne', 'label_2', 'calib'):
        (root / 'training' / sub).mkdir(parents=True, exist_ok=True)
    for frame_id in frame_ids:
        points.tofile(root / 'training' / 'velodyne' / f'{frame_id}.bin')
        (root / 'training' / 'label_2' / f'{frame_id}.txt').write_text(format_label(objects))
        (root / 'training' / 'calib' / f'{frame_id}.txt').write_text(format_calib(calib))
    return calib


def test_info_pkl_counts_and_masks(kitti_folder):
    ds = info_dataset(kitti_folder, pipeline=[dict(type='Pack3DDetInputs')])
    assert len(ds) == 1 and ds.dropped_objects == {'DontCare': 4}
    item = ds[0]
    sample = item['data_samples']
    assert item['inputs']['points'].shape == (17238, 4)
    assert sample.metainfo['num_points_in_gt'] == KITTI_COUNTS
    assert sample.metainfo['num_objects_filtered'] == 4 and sample.metainfo['frame_id'] == '000008'
    assert sample.gt_instances_3d.labels_3d.tolist() == [0] * 6
    semantic = sample.gt_pts_seg.pts_semantic_mask
    assert int((semantic == 0).sum()) == sum(KITTI_COUNTS) and int((semantic == 3).sum()) == 17238 - sum(KITTI_COUNTS)
    assert torch.bincount(sample.gt_pts_seg.pts_instance_mask + 1).tolist()[1:] == KITTI_COUNTS


def test_standard_layout_reads_back_identically(kitti_folder, tmp_path):
    calib = write_standard_layout(kitti_folder, tmp_path)
    parsed = read_calib(tmp_path / 'training' / 'calib' / '000008.txt')
    assert all(np.array_equal(parsed[k], calib[k]) for k in ('R0_rect', 'Tr_velo_to_cam', 'P2'))
    layout = KittiDataset(data_root=str(tmp_path))
    reference = info_dataset(kitti_folder)
    a, b = layout.raw_results(0), reference.raw_results(0)
    for key in ('points', 'gt_bboxes_3d', 'gt_labels_3d', 'pts_semantic_mask', 'pts_instance_mask',
                'num_points_in_gt'):
        assert torch.equal(a[key], b[key]), key
    assert np.allclose(a['lidar2cam'], b['lidar2cam'], atol=0) and a['frame_id'] == '000008'
    assert a['num_objects_filtered'] == 4


def test_split_file_class_filtering_and_other_types(kitti_folder, tmp_path):
    pedestrian = dict(name='Pedestrian', box_camera=[1.0, 1.6, 9.0, 0.8, 1.7, 0.6, 0.0])
    van = dict(name='Van', box_camera=[-4.0, 1.7, 25.0, 4.5, 2.0, 1.9, 1.5])
    write_standard_layout(kitti_folder, tmp_path, frame_ids=('000001', '000002'), extra_objects=[pedestrian, van])
    (tmp_path / 'train.txt').write_text('000002\n')
    ds = KittiDataset(data_root=str(tmp_path), ann_file='train.txt')
    assert len(ds) == 1 and ds.raw_results(0)['frame_id'] == '000002'
    r = ds.raw_results(0)
    assert r['gt_labels_3d'].tolist() == [0] * 6 + [1]
    assert r['num_objects_filtered'] == 5 and ds.dropped_objects == {'DontCare': 4, 'Van': 1}
    listed = KittiDataset(data_root=str(tmp_path), metainfo=dict(classes=('Pedestrian',)))
    assert len(listed) == 2 and listed.raw_results(1)['gt_labels_3d'].tolist() == [0]


def test_non_finite_points_are_dropped_and_counted(kitti_folder, tmp_path):
    write_standard_layout(kitti_folder, tmp_path)
    path = tmp_path / 'training' / 'velodyne' / '000008.bin'
    pts = np.fromfile(path, np.float32).reshape(-1, 4)
    pts[[0, 5, 9], 1] = [np.nan, np.inf, -np.inf]
    pts.tofile(path)
    r = KittiDataset(data_root=str(tmp_path)).raw_results(0)
    assert len(r['points']) == 17235 and r['num_points_invalid'] == 3


def test_unlabelled_frames_need_test_mode(kitti_folder, tmp_path):
    write_standard_layout(kitti_folder, tmp_path)
    (tmp_path / 'training' / 'label_2' / '000008.txt').unlink()
    with pytest.raises(FileNotFoundError, match='label file .* does not exist'):
        KittiDataset(data_root=str(tmp_path))
    r = KittiDataset(data_root=str(tmp_path), test_mode=True).raw_results(0)
    assert r['gt_bboxes_3d'].shape == (0, 7) and (r['pts_semantic_mask'] == 3).all()


def test_format_roundtrips_and_errors(kitti_folder, tmp_path):
    objects = [dict(name='Car', truncated=0.5, occluded=2, alpha=-1.25, bbox=[1.0, 2.0, 3.0, 4.0],
                    box_camera=[1.5, 1.7, 10.25, 3.9, 1.56, 1.6, -0.125])]
    label = tmp_path / 'label.txt'
    label.write_text(format_label(objects))
    parsed = read_label(label)[0]
    assert parsed['box_camera'] == objects[0]['box_camera'] and parsed['occluded'] == 2
    label.write_text('Car 0 0 0 1 2 3\n')
    with pytest.raises(ValueError, match='15 or 16 fields'):
        read_label(label)
    (tmp_path / 'calib.txt').write_text('P2: 1 2 3\n')
    with pytest.raises(ValueError, match='P2 needs 12 numbers'):
        read_calib(tmp_path / 'calib.txt')
    (tmp_path / 'calib.txt').write_text('P2: ' + ' '.join(['1'] * 12) + '\n')
    with pytest.raises(ValueError, match=r"lacks \['R0_rect', 'Tr_velo_to_cam'\]"):
        read_calib(tmp_path / 'calib.txt')
    frames = read_info_pkl(kitti_folder / '000008.pkl')
    assert frames[0]['frame_id'] == '000008' and len(frames[0]['objects']) == 10
    (tmp_path / 'bad.pkl').write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match='not an mmdet3d v2 info file'):
        read_info_pkl(tmp_path / 'bad.pkl')
    with pytest.raises(FileNotFoundError, match='point folder'):
        KittiDataset(data_root=str(tmp_path / 'nowhere'))
    with pytest.raises(FileNotFoundError, match='ann_file'):
        KittiDataset(data_root=str(tmp_path), ann_file='missing.txt')
    assert np.allclose(lidar2cam_from_calib(dict(R0_rect=np.eye(4), Tr_velo_to_cam=2 * np.eye(4))), 2 * np.eye(4))


def test_kitti_base_config_smoke(kitti_folder):
    from mmengine.config import Config

    from fsdlite.registry import DATASETS
    cfg = Config.fromfile(str(Path(__file__).resolve().parents[2] / 'configs' / '_base_' / 'datasets' / 'kitti.py'))
    assert cfg.data_root.endswith('shared/data/kitti_object_000008') and cfg.class_names == ('Car', 'Pedestrian',
                                                                                             'Cyclist')
    for loader in (cfg.train_dataloader, cfg.val_dataloader):
        ds = DATASETS.build(dict(loader.dataset, data_root=str(kitti_folder)))
        np.random.seed(0)
        sample = ds[0]['data_samples']
        assert len(sample.gt_instances_3d.bboxes_3d) == 6
        assert sample.metainfo['num_points_filtered'] > 0  # points outside [0, -40, -3, 70.4, 40, 1]
