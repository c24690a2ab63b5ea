"""SIR: cluster features equal a per-cluster loop, permutation invariance, gradients, invalid input."""
import pytest
import torch

from fsdlite.models.fsd.sir import SIR
from fsdlite.registry import MODELS


def _sir(**kw):
    torch.manual_seed(0)
    return MODELS.build(dict(type='SIR', in_channels=5, block_channels=((8, 6), (4,)), rel_channels=(4,), **kw))


def _loop_reference(sir, feats, xyz, cluster, cluster_xyz):
    """Run every cluster alone (a per-cluster Python loop) through the same blocks."""
    out = []
    for k in range(cluster_xyz.shape[0]):
        sel = cluster == k
        x = feats[sel]
        rel = (xyz[sel] - cluster_xyz[k]) / sir.xyz_normalizer
        maxima = []
        for block in sir.blocks:
            h = torch.cat([x, rel], dim=1)
            for i, layer in enumerate(block.layers):
                h = layer(h)
                if i == 0:
                    h = h * block.gate(rel)
                m = h.max(dim=0).values
                maxima.append(m)
                h = torch.cat([h, m.expand_as(h)], dim=1)
            x = h + x if h.shape[1] == x.shape[1] else h
        out.append(torch.cat(maxima))
    return torch.stack(out)


def _data(p=40, k=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    cluster = torch.cat([torch.arange(k), torch.randint(0, k, (p - k,), generator=g)])
    return (torch.randn(p, 5, generator=g), torch.randn(p, 3, generator=g) * 3, cluster,
            torch.randn(k, 3, generator=g))


def test_segment_max_equals_per_cluster_loop():
    sir = _sir()
    feats, xyz, cluster, cluster_xyz = _data()
    out, points = sir(feats, xyz, cluster, 5, cluster_xyz)
    assert out.shape == (5, sir.out_channels) and sir.out_channels == 8 + 6 + 4
    assert points.shape == (40, sir.point_channels) and sir.point_channels == 8
    assert torch.allclose(out, _loop_reference(sir, feats, xyz, cluster, cluster_xyz), atol=1e-5)


def test_shortcut_when_widths_match():
    torch.manual_seed(0)
    sir = SIR(in_channels=8, block_channels=((4,), (4,)), rel_channels=())
    feats, xyz, cluster, cluster_xyz = _data()
    feats = torch.randn(40, 8)
    out, _ = sir(feats, xyz, cluster, 5, cluster_xyz)
    assert torch.allclose(out, _loop_reference(sir, feats, xyz, cluster, cluster_xyz), atol=1e-5)


def test_position_layers_tell_near_from_far():
    """The layers fed relative positions (each block's gate and first layer) have a bias before their LayerNorm:
    without it ``LN(W r) = LN(W 2r)``, so a point and one twice as far in the same direction looked alike."""
    sir = _sir()
    with torch.no_grad():
        for block in sir.blocks:
            rel = torch.randn(16, 3)
            first = block.layers[0]
            assert block.gate[0].linear.bias is not None and first.linear.bias is not None
            assert not torch.allclose(block.gate(rel), block.gate(2 * rel), atol=1e-3)
            x = torch.zeros(16, first.in_channels - 3)
            assert not torch.allclose(first(torch.cat([x, rel], 1)), first(torch.cat([x, 2 * rel], 1)), atol=1e-3)
            # the layers after them read features, not positions: no bias (the norm's shift replaces it)
            assert all(layer.linear.bias is None for layer in block.layers[1:])


def test_permutation_invariance_and_gradients():
    sir = _sir()
    feats, xyz, cluster, cluster_xyz = _data()
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(3))
    out, _ = sir(feats, xyz, cluster, 5, cluster_xyz)
    out_perm, _ = sir(feats[perm], xyz[perm], cluster[perm], 5, cluster_xyz)
    assert torch.allclose(out, out_perm, atol=1e-6)
    feats.requires_grad_(True)
    sir(feats, xyz, cluster, 5, cluster_xyz)[0].sum().backward()
    assert feats.grad is not None and torch.isfinite(feats.grad).all() and feats.grad.abs().sum() > 0
    assert all(p.grad is not None for p in sir.parameters())


def test_empty_input():
    sir = _sir()
    out, points = sir(torch.zeros(0, 5), torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64), 0, torch.zeros(0, 3))
    assert out.shape == (0, sir.out_channels) and points.shape == (0, sir.point_channels)


def test_config_not_mutated_and_invalid():
    cfg = dict(type='SIR', in_channels=4, block_channels=[[8, 8]], rel_channels=[4])
    MODELS.build(cfg)
    MODELS.build(cfg)
    assert cfg['block_channels'] == [[8, 8]] and cfg['rel_channels'] == [4]
    with pytest.raises(ValueError, match='block_channels'):
        SIR(4, block_channels=((8, 0),))
    with pytest.raises(ValueError, match='xyz_normalizer'):
        SIR(4, xyz_normalizer=(1.0, 0.0, 1.0))
    sir = _sir()
    with pytest.raises(ValueError, match='cluster_xyz'):
        sir(torch.zeros(3, 5), torch.zeros(3, 3), torch.zeros(3, dtype=torch.int64), 2, torch.zeros(1, 3))
