"""BatchNorm folding at inference: same values as the unfolded layers, only when allowed, never stale."""
import pytest
import torch
from torch import nn

from fsdlite.models.lidar import SparseUNet
from fsdlite.models.layers.bn_fold import batch_norm_affine, fold_batch_norm, layer_by_layer
from fsdlite.models.layers.mlp import LinearNormAct


def _layer(randomize_norms, seed=0, **kwargs):
    torch.manual_seed(seed)
    return randomize_norms(LinearNormAct(7, 5, **kwargs), seed).eval()


def _norm_calls(layer):
    calls = []
    layer.norm.register_forward_hook(lambda *args: calls.append(1))
    return calls


def test_batch_norm_affine_is_the_eval_norm(randomize_norms):
    norm = randomize_norms(nn.BatchNorm1d(6, eps=1e-3), 1).eval()
    y = torch.randn(20, 6)
    scale, shift = batch_norm_affine(norm)
    assert torch.allclose(y * scale + shift, norm(y), atol=1e-6)
    assert batch_norm_affine(norm.train()) is None  # batch statistics: not an affine map
    assert batch_norm_affine(nn.BatchNorm1d(6, track_running_stats=False).eval()) is None
    assert batch_norm_affine(nn.LayerNorm(6)) is None


def test_linear_norm_act_folds_only_without_gradients(randomize_norms):
    layer = _layer(randomize_norms)
    calls = _norm_calls(layer)
    x = torch.randn(30, 7)
    expected = layer(x)  # gradients enabled: unfolded
    assert calls == [1]
    with torch.no_grad():
        folded = layer(x)
        assert calls == [1]  # the norm was folded into the linear layer
        with layer_by_layer():
            assert torch.equal(layer(x), expected)
        assert calls == [1, 1]
    with torch.inference_mode():
        assert torch.allclose(layer(x), expected, atol=1e-5)
    assert torch.allclose(folded, expected, atol=1e-5) and not torch.equal(folded, torch.zeros_like(folded))
    with torch.no_grad():
        layer.train()(x)  # training mode: batch statistics, unfolded
    assert calls == [1, 1, 1]


@pytest.mark.parametrize('norm_cfg', [dict(type='LN'), None])
def test_other_norms_are_not_folded(norm_cfg, randomize_norms):
    layer = _layer(randomize_norms, norm_cfg=norm_cfg)
    x = torch.randn(12, 7)
    with torch.no_grad():
        assert fold_batch_norm(layer.norm, layer.linear.weight, layer.linear.bias, torch.t, 'linear') is None
        assert torch.equal(layer(x), nn.Sequential.forward(layer, x))


def test_gathered_concat_folds_like_the_concatenation(randomize_norms):
    layer = _layer(randomize_norms, 2)
    x, group = torch.randn(40, 4), torch.randn(6, 3)
    index = torch.randint(0, 6, (40,))
    expected = layer(torch.cat([x, group[index]], 1))
    with torch.no_grad():
        out = layer.forward_gathered_concat(x, group, index, lambda t, i: t.index_select(0, i))
    assert torch.allclose(out, expected, atol=1e-5)


def test_folded_weights_follow_every_change(randomize_norms):
    layer = _layer(randomize_norms, 3)
    x = torch.randn(25, 7)
    with torch.no_grad():
        layer(x)  # builds the cache
        layer.linear.weight.mul_(-2.0)           # in place (optimizer steps)
        layer.norm.running_var.fill_(0.25)       # buffers too
        with layer_by_layer():
            expected = layer(x)
        assert torch.allclose(layer(x), expected, atol=1e-5)
        other = _layer(randomize_norms, 4)
        layer.load_state_dict(other.state_dict())  # load_state_dict copies in place
        assert torch.allclose(layer(x), nn.Sequential.forward(other, x), atol=1e-5)
        layer.double()                            # new storage and dtype
        with layer_by_layer():
            expected = layer(x.double())
        folded = layer(x.double())
        assert folded.dtype == torch.float64 and torch.allclose(folded, expected, atol=1e-12)


def test_sparse_unet_fused_path_folds_its_norms(randomize_norms):
    torch.manual_seed(0)
    net = randomize_norms(SparseUNet(5, voxel_size=(1.0, 1.0, 1.0), point_range=(0.0, 0.0, 0.0, 12.0, 12.0, 8.0),
                                     base_channels=4, encoder_channels=((4,), (8, 8), (8,)),
                                     decoder_channels=((8, 8, 8), (8, 8, 4), (4, 4, 6)), conv_backend='fsdlite'),
                          5).eval()
    g = torch.Generator().manual_seed(0)
    keys = torch.randperm(8 * 12 * 12, generator=g)[:70]
    coors = torch.stack([torch.zeros_like(keys), keys // 144, (keys // 12) % 12, keys % 12], 1)
    feats = torch.randn(70, 5, generator=g)
    calls = []
    for m in net.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.register_forward_hook(lambda *args: calls.append(1))
    norms = sum(isinstance(m, nn.BatchNorm1d) for m in net.modules())
    expected = net(feats, coors, 1)  # gradients enabled: unfolded
    assert len(calls) == norms
    with torch.no_grad():
        folded = net(feats, coors, 1)
    assert len(calls) == norms  # every norm folded into its conv
    assert torch.allclose(folded, expected, atol=1e-5)
    net.conv_backend = 'spconv'
    with torch.no_grad():
        assert torch.allclose(net(feats, coors, 1), expected, atol=1e-4)
