"""DynamicVFE: per-voxel max against a loop, centre offsets, gradients, bad inputs."""
import pytest
import torch

from fsdlite.models.lidar import DynamicVFE

GRID = dict(voxel_size=(1.0, 1.0, 1.0), point_range=(0.0, 0.0, 0.0, 4.0, 4.0, 4.0))


def _tiny_case():
    # 6 points in 3 voxels; voxel rows in first-occurrence order.
    points = torch.tensor([[0.2, 0.3, 0.1, 1.0], [0.8, 0.1, 0.4, 0.0], [2.5, 1.5, 0.5, 0.3],
                           [0.5, 0.5, 0.5, 0.7], [3.1, 3.9, 3.2, 0.2], [2.2, 1.1, 0.9, 0.9]])
    point2voxel = torch.tensor([0, 0, 1, 0, 2, 1])
    voxel_coors = torch.tensor([[0, 0, 0, 0], [0, 0, 1, 2], [0, 3, 3, 3]])
    return points, point2voxel, voxel_coors


def test_point_inputs_offsets():
    vfe = DynamicVFE(4, (8,), **GRID)
    points, p2v, coors = _tiny_case()
    x = vfe.point_inputs(points, p2v, coors)
    assert x.shape == (6, 10)
    mean0 = points[[0, 1, 3], :3].mean(0)
    assert torch.allclose(x[0, 4:7], points[0, :3] - mean0)
    assert torch.allclose(x[4, 4:7], torch.zeros(3))  # alone in its voxel
    assert torch.allclose(x[2, 7:10], points[2, :3] - torch.tensor([2.5, 1.5, 0.5]))
    plain = DynamicVFE(4, (8,), with_cluster_center=False, with_voxel_center=False, **GRID)
    assert torch.equal(plain.point_inputs(points, p2v, coors), points)


def test_voxel_max_equals_per_voxel_loop():
    torch.manual_seed(0)
    vfe = DynamicVFE(4, (8, 6), **GRID).eval()
    points, p2v, coors = _tiny_case()
    voxel_feats, point_feats = vfe(points, p2v, coors)
    assert voxel_feats.shape == (3, 6) and point_feats.shape == (6, 6)
    # Re-run the layers by hand with an explicit loop over voxels.
    x = vfe.point_inputs(points, p2v, coors)
    for i, layer in enumerate(vfe.layers):
        pf = layer(x)
        vmax = torch.stack([pf[p2v == v].max(0).values for v in range(3)])
        if i + 1 < len(vfe.layers):
            x = torch.cat([pf, vmax[p2v]], 1)
    assert torch.allclose(voxel_feats, vmax) and torch.allclose(point_feats, pf)


def test_gradcheck_float64():
    torch.manual_seed(0)
    vfe = DynamicVFE(4, (5, 3), norm_cfg=dict(type='LN'), **GRID).double()
    points, p2v, coors = _tiny_case()
    points = (points.double() + 1e-3 * torch.randn(6, 4, dtype=torch.float64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda p: vfe(p, p2v, coors)[0], (points,), eps=1e-6, atol=1e-5)


def test_batchnorm_training_backward():
    vfe = DynamicVFE(4, (8, 8), **GRID)
    points, p2v, coors = _tiny_case()
    voxel_feats, _ = vfe(points, p2v, coors)
    voxel_feats.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in vfe.parameters())


def test_bad_arguments():
    with pytest.raises(ValueError, match='in_channels'):
        DynamicVFE(2, (8,), **GRID)
    with pytest.raises(ValueError, match='feat_channels'):
        DynamicVFE(4, (), **GRID)
    with pytest.raises(ValueError, match='voxel_size'):
        DynamicVFE(4, (8,), voxel_size=(1, 1), point_range=GRID['point_range'])
    vfe = DynamicVFE(4, (8,), **GRID)
    points, p2v, coors = _tiny_case()
    with pytest.raises(ValueError, match=r'points must have shape \(P, 4\)'):
        vfe(points[:, :3], p2v, coors)
    with pytest.raises(ValueError, match='point2voxel'):
        vfe(points, p2v[:3], coors)
