"""SparseUNet: output voxel layout equals the input layout, configurable stages, gradients, bad configs."""
import pytest
import torch

from fsdlite.models.backbones import SparseUNet

GRID = dict(voxel_size=(1.0, 1.0, 1.0), point_range=(0.0, 0.0, 0.0, 12.0, 12.0, 8.0))
SMALL = dict(base_channels=4, encoder_channels=((4,), (8, 8), (8,)),
             decoder_channels=((8, 8, 8), (8, 8, 4), (4, 4, 6)))


def _voxels(n, seed, batch_size=2):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randperm(batch_size * 8 * 12 * 12, generator=g)[:n]
    b, rest = keys // (8 * 12 * 12), keys % (8 * 12 * 12)
    coors = torch.stack([b, rest // 144, (rest // 12) % 12, rest % 12], 1)
    return torch.randn(n, 5, generator=g), coors


def test_output_rows_follow_input_rows():
    torch.manual_seed(0)
    net = SparseUNet(5, **GRID, **SMALL).eval()
    feats, coors = _voxels(60, 0)
    out = net(feats, coors, 2)
    assert out.shape == (60, 6) and net.out_channels == 6
    # Permuting the input voxels permutes the output rows identically: row i belongs to voxel i.
    perm = torch.randperm(60, generator=torch.Generator().manual_seed(1))
    out_perm = net(feats[perm], coors[perm], 2)
    assert torch.allclose(out_perm, out[perm], atol=1e-5)


def test_output_layout_is_the_input_index_set():
    net = SparseUNet(5, **GRID, **SMALL).eval()
    feats, coors = _voxels(40, 2)
    seen = {}

    def record(module, args, output):
        seen['indices'] = output.indices

    net.upsample[-1].register_forward_hook(record)
    net(feats, coors, 2)
    assert torch.equal(seen['indices'].long(), coors)


def test_samples_are_independent():
    net = SparseUNet(5, **GRID, **SMALL).eval()
    feats, coors = _voxels(50, 3)
    out = net(feats, coors, 2)
    first = coors[:, 0] == 0
    alone = net(feats[first], coors[first], 1)
    assert torch.allclose(alone, out[first], atol=1e-5)


def test_backward_reaches_every_parameter():
    net = SparseUNet(5, **GRID, **SMALL)
    feats, coors = _voxels(60, 4)
    feats.requires_grad_()
    net(feats, coors, 2).square().sum().backward()
    assert feats.grad is not None and torch.isfinite(feats.grad).all()
    assert all(p.grad is not None for p in net.parameters())


def test_stage_layout_from_config():
    net = SparseUNet(5, **GRID, base_channels=4, encoder_channels=((4,), (8, 8, 8)),
                     decoder_channels=((8, 8, 4), (4, 4, 4)))
    assert len(net.encoder) == 2 and len(net.encoder[1]) == 3
    assert net.encoder[1][0][0].__class__.__name__ == 'SparseConv3d'
    assert net.upsample[0][0].__class__.__name__ == 'SparseInverseConv3d'
    assert net.upsample[1][0].__class__.__name__ == 'SubMConv3d'
    assert net.sparse_shape == (8, 12, 12)


@pytest.mark.parametrize('kwargs, match', [
    (dict(decoder_channels=((8, 8, 8),)), 'one \\(lateral, merge, up\\) entry per encoder stage'),
    (dict(decoder_channels=((8, 8), (8, 8), (4, 4))), r'decoder_channels\[0\] must have 3 entries'),
    (dict(decoder_channels=((8, 5, 8), (8, 8, 4), (4, 4, 6))), 'multiple of merge'),
    (dict(encoder_channels=((4,), (), (8,))), r'encoder_channels\[1\] must not be empty'),
])
def test_bad_configs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SparseUNet(5, **GRID, **{**SMALL, **kwargs})


def test_bad_inputs():
    net = SparseUNet(5, **GRID, **SMALL)
    feats, coors = _voxels(10, 5)
    with pytest.raises(ValueError, match=r'voxel_feats must have shape \(V, 5\)'):
        net(feats[:, :4], coors, 2)
    with pytest.raises(ValueError, match='at least one voxel'):
        net(feats[:0], coors[:0], 2)
