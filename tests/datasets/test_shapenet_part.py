"""ShapeNet-Part reader on the 'Cap' subset (DERIVED from
torch-points3d/torch-points3d@cf0061bd:test/data/shapenet/processed/cap_{val,test}.pt)."""
import numpy as np
import pytest

from fsdlite.datasets.shapenet_part import ShapeNetPartDataset

CAP = 'shapenet_cap/shapenet_part_cap.npz'


def test_cap_splits(shared_data):
    val = ShapeNetPartDataset(shared_data / CAP, split='val')
    test = ShapeNetPartDataset(shared_data / CAP, split='test', with_normals=True)
    assert len(val) == 5 and len(test) == 11
    assert sum(len(val[i]['inputs']['points']) for i in range(5)) == 13259
    assert sum(len(test[i]['inputs']['points']) for i in range(11)) == 27812
    assert val.part_ids == (6, 7) and val.metainfo['classes'] == ('part_6', 'part_7')
    item = test[3]
    assert item['inputs']['points'].shape[1] == 6
    norms = item['inputs']['points'][:, 3:].norm(dim=1)
    assert abs(float(norms.median()) - 1) < 1e-3  # normals (some shrunk by the source's grid averaging)
    labels = np.concatenate([val[i]['data_samples'].gt_pts_seg.pts_semantic_mask.numpy() for i in range(5)])
    assert set(np.unique(labels)) == {0, 1}


def test_part_id_mapping_and_errors(shared_data, tmp_path):
    ds = ShapeNetPartDataset(shared_data / CAP, split='val', part_ids=[7, 6])
    with np.load(shared_data / CAP) as data:
        raw = data['val_part_label'][data['val_shape_index'] == 0]
    labels = ds[0]['data_samples'].gt_pts_seg.pts_semantic_mask.numpy()
    np.testing.assert_array_equal(labels, np.where(raw == 7, 0, 1))
    with pytest.raises(ValueError, match='part ids'):
        ShapeNetPartDataset(shared_data / CAP, split='val', part_ids=[6])
    with pytest.raises(ValueError, match="splits in the file: \\['test', 'val'\\]"):
        ShapeNetPartDataset(shared_data / CAP, split='train')
    with pytest.raises(FileNotFoundError):
        ShapeNetPartDataset(tmp_path / 'none.npz')
    with pytest.raises(IndexError):
        ds[5]
