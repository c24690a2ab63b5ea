"""Bad VoxelNet inputs give clear errors (zero muons, k > M, NaN, mismatched V, wrong shapes)."""
import pytest
import torch
from mmengine.dataset import pseudo_collate

from fsdlite.models.voxelnet.gravnet import GravNetLayer
from fsdlite.structures import Det3DDataSample, PointData


@pytest.fixture
def model(build_voxelnet):
    return build_voxelnet(dtype=torch.float32).eval()


def test_zero_muons(model, inputs):
    feats, centres = inputs(1, 12, 30, dtype=torch.float32)
    with pytest.raises(ValueError, match='at least one muon.*M=0 muons'):
        model({'muon_features': feats[:, :, :0], 'voxel_centres': centres})


@pytest.mark.parametrize('impl', ['dense', 'efficient'])
def test_k_larger_than_muons(model, inputs, impl):
    model.impl = impl
    feats, centres = inputs(1, 12, 10, dtype=torch.float32)
    with pytest.raises(ValueError, match='k=25 neighbours requested but each graph has only N=10 nodes'):
        model({'muon_features': feats, 'voxel_centres': centres})


def test_k_larger_than_voxels(model, inputs):
    feats, centres = inputs(1, 8, 30, dtype=torch.float32)
    with pytest.raises(ValueError, match='k=12 neighbours requested but each graph has only N=8 nodes'):
        model({'muon_features': feats, 'voxel_centres': centres})


@pytest.mark.parametrize('value', [float('nan'), float('inf')])
def test_non_finite_features(model, inputs, value):
    feats, centres = inputs(1, 12, 30, dtype=torch.float32)
    feats[0, 3, 7, 2] = value
    with pytest.raises(ValueError, match=r'muon_features contains 1 non-finite values .*first at index \[0, 3, 7, 2\]'):
        model({'muon_features': feats, 'voxel_centres': centres})


def test_mismatched_voxel_counts(model, inputs):
    feats, centres = inputs(1, 12, 30, dtype=torch.float32)
    with pytest.raises(ValueError, match=r'voxel_centres must have shape \(1, 12, 3\)'):
        model({'muon_features': feats, 'voxel_centres': centres[:, :10]})
    sample = Det3DDataSample()
    sample.gt_pts_seg = PointData(pts_semantic_mask=torch.zeros(10, dtype=torch.long), x0=torch.ones(10),
                                  block_mask=torch.zeros(10, dtype=torch.bool))
    with pytest.raises(ValueError, match=r'gt_pts_seg.pts_semantic_mask has shape \(10,\) but the input has V=12'):
        model({'muon_features': feats, 'voxel_centres': centres}, [sample], mode='loss')
    with pytest.raises(ValueError, match=r'one data sample per volume \(1\), got 2'):
        model({'muon_features': feats, 'voxel_centres': centres}, [sample, sample], mode='loss')


def test_wrong_feature_count_and_rank(model, inputs):
    feats, centres = inputs(1, 12, 30, dtype=torch.float32)
    with pytest.raises(ValueError, match='F=8 features, the config expects 9'):
        model({'muon_features': feats[..., :8], 'voxel_centres': centres})
    with pytest.raises(ValueError, match=r'must be a \(B, V, M, F\) tensor, got \(12, 30, 9\)'):
        model({'muon_features': feats[0], 'voxel_centres': centres})


def test_invalid_impl_and_mode(build_voxelnet, model, inputs):
    with pytest.raises(ValueError, match=r"impl must be one of \['dense', 'efficient'\], got 'fast'"):
        build_voxelnet(impl='fast')
    feats, centres = inputs(1, 12, 30, dtype=torch.float32)
    with pytest.raises(ValueError, match="mode must be 'tensor', 'loss' or 'predict', got 'train'"):
        model({'muon_features': feats, 'voxel_centres': centres}, mode='train')
    with pytest.raises(ValueError, match='k must be >= 1'):
        GravNetLayer(4, k=0)


def test_preprocessor_rejects_mixed_volume_sizes(model, inputs):
    a, ca = inputs(1, 12, 30, dtype=torch.float32)
    b, cb = inputs(1, 12, 31, dtype=torch.float32)
    batch = pseudo_collate([dict(inputs=dict(muon_features=a[0], voxel_centres=ca[0])),
                            dict(inputs=dict(muon_features=b[0], voxel_centres=cb[0]))])
    with pytest.raises(ValueError, match='same muon_features shape, got \\[\\(12, 30, 9\\), \\(12, 31, 9\\)\\]'):
        model.data_preprocessor(batch)
