"""Voxel2PointNeck: gathered voxel features and centre offsets."""
import pytest
import torch

from fsdlite.models.lidar import Voxel2PointNeck

GRID = dict(voxel_size=(0.5, 0.5, 1.0), point_range=(0.0, 0.0, 0.0, 2.0, 2.0, 2.0))


def test_values_and_shapes():
    voxel_feats = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    voxel_coors = torch.tensor([[0, 0, 0, 0], [0, 1, 3, 2]])
    points = torch.tensor([[0.1, 0.3, 0.5, 9.0], [1.2, 1.9, 1.0, 9.0], [0.25, 0.25, 0.5, 9.0]])
    p2v = torch.tensor([0, 1, 0])
    neck = Voxel2PointNeck(2, **GRID, normalize_offset=False)
    out = neck(voxel_feats, points, p2v, voxel_coors)
    assert out.shape == (3, 5) and neck.out_channels == 5
    assert torch.equal(out[:, :2], voxel_feats[p2v])
    expected = torch.tensor([[-0.15, 0.05, 0.0], [-0.05, 0.15, -0.5], [0.0, 0.0, 0.0]])
    assert torch.allclose(out[:, 2:], expected, atol=1e-6)
    normalized = Voxel2PointNeck(2, **GRID)(voxel_feats, points, p2v, voxel_coors)
    assert torch.allclose(normalized[:, 2:], expected / torch.tensor([0.5, 0.5, 1.0]), atol=1e-6)
    assert normalized[:, 2:].abs().max() <= 0.5


def test_bad_inputs():
    neck = Voxel2PointNeck(2, **GRID)
    with pytest.raises(ValueError, match=r'voxel_feats must have shape \(V, 2\)'):
        neck(torch.zeros(2, 3), torch.zeros(1, 3), torch.zeros(1, dtype=torch.long), torch.zeros(2, 4))
    with pytest.raises(ValueError, match='voxel_coors has 1'):
        neck(torch.zeros(2, 2), torch.zeros(1, 3), torch.zeros(1, dtype=torch.long), torch.zeros(1, 4))
