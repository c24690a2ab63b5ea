"""MuonVolumeDataset: registration, determinism, shapes, bookkeeping, baseline and bad arguments."""
import pytest
import torch

from fsdlite.datasets.muon.dataset import MuonVolumeDataset
from fsdlite.datasets.muon.volume import VoxelGrid, random_block_volume
from fsdlite.registry import DATASETS


@pytest.fixture(scope='module')
def dataset():
    return DATASETS.build(dict(type='MuonVolumeDataset', num_volumes=3, grid_shape=(4, 3, 2), voxel_size=0.25,
                               num_muons=120, seed=7))


def test_item_layout(dataset):
    item = dataset[1]
    feats = item['inputs']['muon_features']
    assert feats.shape == (24, 120, 9) and feats.dtype == torch.float32
    centres = item['inputs']['voxel_centres']
    assert centres.shape == (24, 3)
    gt = item['data_samples'].gt_pts_seg
    assert gt.pts_semantic_mask.shape == (24,) and gt.pts_semantic_mask.dtype == torch.int64
    assert gt.block_mask.any() and (~gt.block_mask).any()
    assert len(gt.pts_semantic_mask[gt.block_mask].unique()) == 1
    assert set(gt.pts_semantic_mask[~gt.block_mask].unique().tolist()).isdisjoint(
        gt.pts_semantic_mask[gt.block_mask].unique().tolist())
    torch.testing.assert_close(gt.x0, dataset.class_x0[gt.pts_semantic_mask].float())
    # per-muon columns are shared by all voxels; PoCA offsets differ by the voxel centre
    assert (feats[:, :, :5] == feats[:1, :, :5]).all()
    poca = feats[:, :, 5:8] + centres[:, None]
    torch.testing.assert_close(poca, poca[:1].expand_as(poca), atol=1e-5, rtol=0)
    torch.testing.assert_close(feats[:, :, 8], feats[:, :, 5:8].norm(dim=2))
    assert (feats[:, :, :2] >= 0).all() and (feats[:, :, 4] > 0).all()
    # every kept PoCA lies inside the volume
    extent = torch.tensor([1.0, 0.75, 0.5])
    assert ((poca[0] >= -1e-5) & (poca[0] <= extent + 1e-5)).all()


def test_bookkeeping_and_baseline(dataset):
    sample = dataset[0]['data_samples']
    c = sample.muon_counts
    assert c['generated'] == c['undetected'] + c['poca_outside'] + c['kept']
    assert c['kept'] - c['surplus'] == 120
    gt = sample.gt_pts_seg
    assert gt.baseline_count.sum() == 120
    assert torch.isnan(gt.baseline_score).eq(gt.baseline_count == 0).all()


def test_lost_muons_are_reported(mm_warnings):
    ds = MuonVolumeDataset(num_volumes=2, grid_shape=(2, 2, 2), voxel_size=0.25, num_muons=40, seed=1,
                           simulator=dict(efficiency=0.7))
    c = ds[0]['data_samples'].muon_counts
    lost = c['undetected'] + c['poca_outside'] + c['surplus']
    assert lost > 0 and ds.dropped_totals['muon_counts'] == lost
    found = [m for m in mm_warnings if f"volume 0 kept 40 of {c['generated']} simulated muons" in m]
    assert len(found) == 1 and f"{c['undetected']} undetected" in found[0] and "metainfo['muon_counts']" in found[0]
    ds[1]
    assert len([m for m in mm_warnings if 'MuonVolumeDataset' in m]) == 1


def test_deterministic_by_seed(dataset):
    again = MuonVolumeDataset(num_volumes=3, grid_shape=(4, 3, 2), voxel_size=0.25, num_muons=120, seed=7)
    assert torch.equal(again[2]['inputs']['muon_features'], dataset[2]['inputs']['muon_features'])
    assert not torch.equal(dataset[1]['inputs']['muon_features'], dataset[2]['inputs']['muon_features'])
    other = MuonVolumeDataset(num_volumes=3, grid_shape=(4, 3, 2), voxel_size=0.25, num_muons=120, seed=8)
    assert not torch.equal(other[2]['inputs']['muon_features'], dataset[2]['inputs']['muon_features'])


def test_heavy_blocks_scatter_more():
    ds = MuonVolumeDataset(num_volumes=1, grid_shape=(4, 4, 2), voxel_size=0.25, num_muons=3000,
                           classes=('beryllium', 'lead'), seed=11)
    gt = ds[0]['data_samples'].gt_pts_seg
    lead = gt.pts_semantic_mask == 1
    ok = gt.baseline_count > 0
    assert gt.baseline_score[lead & ok].mean() > gt.baseline_score[~lead & ok].mean() + 1.0


def test_random_block_volume_respects_sizes():
    grid = VoxelGrid((6, 5, 4), 0.1)
    for seed in range(20):
        labels, block = random_block_volume(grid, 5, torch.Generator().manual_seed(seed), block_size=(2, 3))
        coords = grid.coords()[block]
        edges = coords.max(0).values - coords.min(0).values + 1
        assert ((edges >= 2) & (edges <= 3)).all()
        assert block.sum() == edges.prod()


@pytest.mark.parametrize('kwargs,match', [
    (dict(num_muons=0), 'num_muons must be >= 1'),
    (dict(grid_shape=(4, 0, 2)), 'shape must be three positive ints'),
    (dict(classes=('beryllium', 'kryptonite')), r"materials \['kryptonite'\] are unknown"),
    (dict(simulator=dict(num_panels=1)), 'num_panels must be >= 2'),
    (dict(simulator=dict(efficiency=0)), r'efficiency must be in \(0, 1\]'),
    (dict(num_muons=30, muons_per_voxel=31), r'muons_per_voxel must be in \[1, num_muons=30\] or None, got 31'),
])
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MuonVolumeDataset(num_volumes=1, **kwargs)


def test_index_out_of_range(dataset):
    with pytest.raises(IndexError, match='index 3 out of range for 3 volumes'):
        dataset[3]


def test_muons_per_voxel_keeps_the_nearest_pocas(dataset):
    near = MuonVolumeDataset(num_volumes=3, grid_shape=(4, 3, 2), voxel_size=0.25, num_muons=120, seed=7,
                             muons_per_voxel=16)
    full, item = dataset[2], near[2]
    feats, all_feats = item['inputs']['muon_features'], full['inputs']['muon_features']
    assert feats.shape == (24, 16, 9)
    # per voxel: the 16 smallest PoCA distances of all 120 muons, ascending, with their muons' own features
    expected = all_feats[..., 8].sort(dim=1).values[:, :16]
    torch.testing.assert_close(feats[..., 8], expected)
    assert (feats[..., 8].amax(1) <= all_feats[..., 8].sort(dim=1).values[:, 16]).all()
    rows = {tuple(r.tolist()) for r in all_feats[0]}
    assert all(tuple(r.tolist()) in rows for r in feats[0])
    # the baseline and labels still come from all muons of the same simulated volume
    torch.testing.assert_close(item['data_samples'].gt_pts_seg.baseline_score,
                               full['data_samples'].gt_pts_seg.baseline_score, equal_nan=True)
    assert torch.equal(item['data_samples'].gt_pts_seg.pts_semantic_mask,
                       full['data_samples'].gt_pts_seg.pts_semantic_mask)
