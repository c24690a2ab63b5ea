"""Real KITTI frames with full 360 deg scans (../shared/data/kitti_tiny_3d: WenyiZhang0311/kitti_tiny_3d@dbd974d):
the camera field-of-view crop, KITTI annotations for the scoring, and the kitti_tiny configs."""
from pathlib import Path

import numpy as np
import pytest

from fsdlite.datasets.kitti import KittiDataset
from fsdlite.datasets.kitti_format import read_calib
from fsdlite.structures.camera import camera_fov_mask, image_boxes, lidar2img_from_calib, project_points

ROOT = Path(__file__).resolve().parents[2]
PREFIX = dict(pts='velodyne', label='label_2', calib='calib')


@pytest.fixture
def tiny(shared_data):
    return shared_data / 'kitti_tiny_3d'


def test_projection_against_a_hand_projected_point(tiny):
    calib = read_calib(tiny / 'calib' / '000000.txt')
    p2, r0, tr = calib['P2'][:3], calib['R0_rect'][:3, :3], calib['Tr_velo_to_cam'][:3]
    point = np.array([20.0, 3.0, -0.5])
    cam = r0 @ (tr[:, :3] @ point + tr[:, 3])          # lidar -> rectified camera, by hand
    pixel = p2[:, :3] @ cam + p2[:, 3]
    u, v, depth = project_points(point[None], lidar2img_from_calib(calib))
    assert u[0] == pytest.approx(pixel[0] / pixel[2]) and v[0] == pytest.approx(pixel[1] / pixel[2])
    assert depth[0] == pytest.approx(pixel[2])
    # walk a point across the left image edge (u = 0) and below the bottom edge (v = 375)
    m = lidar2img_from_calib(calib)
    ys = np.linspace(10, 25, 301)
    pts = np.stack([np.full_like(ys, 20.0), ys, np.full_like(ys, -0.5)], 1)
    u, _, _ = project_points(pts, m)
    assert np.array_equal(camera_fov_mask(pts, m), u >= 0)
    assert not camera_fov_mask(np.array([[-20.0, 0.0, 0.0], [5.0, 0.0, -1.7]]), m).any()  # behind; under the view


def test_camera_fov_crop_counts_what_it_drops(tiny, mm_warnings):
    full = KittiDataset(data_root=str(tiny), ann_file='ImageSets/val.txt', data_prefix=PREFIX)
    crop = KittiDataset(data_root=str(tiny), ann_file='ImageSets/val.txt', data_prefix=PREFIX, camera_fov=True)
    a, b = full.raw_results(0), crop.raw_results(0)
    assert len(a['points']) > 100000 and 15000 < len(b['points']) < 25000
    assert b['num_points_out_of_view'] == len(a['points']) - len(b['points'])
    assert camera_fov_mask(b['points'], b['lidar2img']).all()
    inside = b['num_points_in_gt'] == a['num_points_in_gt']  # labelled objects lie in the view ...
    assert inside.sum() >= len(inside) - 1 and (b['num_points_in_gt'] <= a['num_points_in_gt']).all()
    truncated = b['kitti_annos']['truncated'][b['kitti_annos']['name'] != 'DontCare'][:len(inside)]
    assert (truncated[~inside.numpy()] > 0).all()  # ... but for the ones the image cuts
    assert any('camera view' in w for w in mm_warnings)


def test_kitti_annotations_keep_every_object(tiny):
    ds = KittiDataset(data_root=str(tiny), ann_file='ImageSets/trainval.txt', data_prefix=PREFIX, camera_fov=True)
    names = np.concatenate([ds.get_data_info(i)['kitti_annos']['name'] for i in range(len(ds))])
    assert {n: int((names == n).sum()) for n in ('Car', 'Van', 'DontCare', 'Pedestrian')} == \
        dict(Car=64, Van=5, DontCare=95, Pedestrian=12)
    errors = []
    for i in range(len(ds)):
        info = ds.get_data_info(i)
        annos = info['kitti_annos']
        cars = annos['name'] == 'Car'
        assert np.allclose(annos['box_lidar'][cars], info['gt_bboxes_3d'][info['gt_labels_3d'] == 0].numpy(),
                           atol=1e-4)
        # the labels' 2D boxes agree with the 3D boxes projected through the calib (unoccluded, untruncated cars)
        clean = cars & (annos['occluded'] == 0) & (annos['truncated'] == 0)
        projected, _ = image_boxes(annos['box_lidar'][clean], info['lidar2img'])
        errors.append(np.abs(projected - annos['bbox'][clean]).reshape(-1))
    errors = np.concatenate(errors)
    assert len(errors) > 80 and np.median(errors) < 5 and errors.max() < 30


def test_camera_fov_needs_p2(tiny, tmp_path):
    for sub in ('velodyne', 'label_2', 'calib'):
        (tmp_path / sub).mkdir()
    (tmp_path / 'velodyne' / '000000.bin').write_bytes((tiny / 'velodyne' / '000000.bin').read_bytes())
    (tmp_path / 'label_2' / '000000.txt').write_text((tiny / 'label_2' / '000000.txt').read_text())
    lines = [line for line in (tiny / 'calib' / '000000.txt').read_text().splitlines() if not line.startswith('P2')]
    (tmp_path / 'calib' / '000000.txt').write_text('\n'.join(lines))
    with pytest.raises(ValueError, match='P2'):
        KittiDataset(data_root=str(tmp_path), data_prefix=PREFIX, camera_fov=True)
    with pytest.raises(TypeError, match='camera_fov'):
        KittiDataset(data_root=str(tiny), ann_file='ImageSets/val.txt', data_prefix=PREFIX, camera_fov='yes')
    with pytest.raises(ValueError, match='image_size'):
        KittiDataset(data_root=str(tiny), ann_file='ImageSets/val.txt', data_prefix=PREFIX, image_size=(0, 375))


@pytest.mark.parametrize('config', ['configs/fsd/fsdlite_kitti_tiny.py', 'configs/fsdv2/fsdv2lite_kitti_tiny.py'])
def test_kitti_tiny_configs(config, tiny):
    from mmengine.config import Config

    from fsdlite.registry import DATASETS
    cfg = Config.fromfile(str(ROOT / config))
    assert cfg.load_from and cfg.test_evaluator.kitti_scoring
    val = DATASETS.build(dict(cfg.val_dataloader.dataset, data_root=str(tiny)))
    train_cfg = dict(cfg.train_dataloader.dataset, data_root=str(tiny))
    train_cfg['pipeline'] = [t for t in train_cfg['pipeline'] if t['type'] != 'ObjectSample']
    train = DATASETS.build(train_cfg)
    assert len(val) == 5 and len(train) == 25
    assert [val.get_data_info(i)['frame_id'] for i in range(5)] == [f'0000{i}' for i in range(25, 30)]
    sample = val[0]['data_samples']
    assert sample.metainfo['num_points_out_of_view'] > 0 and 'kitti_annos' in sample.metainfo
