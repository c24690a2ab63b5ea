"""S3DIS room reader on the Area 5 conferenceRoom_1 subset (DERIVED from
SysCV/vis4d-test-data@8e92136:s3d_test/Area_5/conferenceRoom_1/Annotations, see shared/reference/data.md)."""
import numpy as np
import pytest
import torch

from fsdlite.datasets.s3dis import S3DIS_CLASSES, S3DISRoomDataset, load_s3dis_room

ROOM = 's3dis_area5_conf1/area5_conferenceRoom_1_subset.npz'


def test_load_room(shared_data):
    room = load_s3dis_room(shared_data / ROOM)
    assert room['xyz'].shape == (246417, 3) and room['labels'].shape == (246417,)
    counts = np.bincount(room['labels'], minlength=13)
    assert counts[S3DIS_CLASSES.index('ceiling')] == 50000 and counts[S3DIS_CLASSES.index('board')] == 47806


def test_train_regions(shared_data):
    ds = S3DISRoomDataset(shared_data / ROOM, mode='train', num_samples=4, sphere_radius=1.0, max_points=5000)
    item = ds[0]
    pts = item['inputs']['points']
    assert pts.shape[1] == 6 and len(pts) <= 5000 and 0 <= float(pts[:, 3:].min()) <= float(pts[:, 3:].max()) <= 1
    assert float(pts[:, :2].norm(dim=1).max()) < 1.0 and float(pts[:, 2].min()) >= 0
    meta = item['data_samples'].metainfo
    rows = meta['point_index']
    labels = item['data_samples'].gt_pts_seg.pts_semantic_mask
    torch.testing.assert_close(labels, torch.from_numpy(ds.labels[rows]))
    assert meta['num_dropped_points'] > 0  # a 1 m region holds more than 5000 points: the cap is reported
    torch.testing.assert_close(ds[0]['inputs']['points'], pts)


def test_test_tiles_cover_every_point_once(shared_data):
    ds = S3DISRoomDataset(shared_data / ROOM, mode='test', tile_size=2.0)
    rows = np.concatenate([ds.indices(i)[0] for i in range(len(ds))])
    assert len(rows) == 246417 and len(np.unique(rows)) == 246417
    assert ds[0]['data_samples'].metainfo['num_dropped_points'] == 0


def test_bad_inputs(tmp_path, shared_data):
    with pytest.raises(FileNotFoundError):
        load_s3dis_room(tmp_path / 'missing.npz')
    np.savez(tmp_path / 'bad.npz', xyz=np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError, match='missing keys'):
        load_s3dis_room(tmp_path / 'bad.npz')
    np.savez(tmp_path / 'labels.npz', xyz=np.zeros((2, 3), np.float32), rgb=np.zeros((2, 3), np.uint8),
             sem_label=np.array([0, 13], np.uint8))
    with pytest.raises(ValueError, match='sem_label'):
        load_s3dis_room(tmp_path / 'labels.npz')
    with pytest.raises(ValueError, match='mode'):
        S3DISRoomDataset(shared_data / ROOM, mode='val')
