"""VoxelNet components against hand-written per-node loops and their contracts."""
import math

import pytest
import torch

from fsdlite.models.voxelnet.attention import GraphSelfAttention
from fsdlite.models.voxelnet.collapse import AttentionCollapse
from fsdlite.models.voxelnet.gravnet import GravNetLayer
from fsdlite.models.voxelnet.heads import VoxelClassHead, VoxelX0Head, balanced_voxel_weights
from fsdlite.models.voxelnet.norm import FeatureStandardizer


def test_gravnet_matches_a_per_node_loop():
    torch.manual_seed(0)
    layer = GravNetLayer(3, latent_dims=2, message_dims=4, hidden_channels=(8,), out_channels=5, k=3).double()
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    with torch.no_grad():
        expected = _gravnet_loop(layer, x)
    for impl in ('dense', 'efficient'):
        torch.testing.assert_close(layer(x, impl), expected)


def _gravnet_loop(layer, x):
    with_means = torch.cat([x, x.mean(1, keepdim=True).expand_as(x)], 2)
    slr = layer.coords_and_messages(with_means)
    s, msg = slr[..., :2], slr[..., 2:]
    expected = torch.empty(2, 6, 5, dtype=torch.float64)
    for b in range(2):
        for i in range(6):
            d2 = [float(((s[b, i] - s[b, j]) ** 2).sum()) for j in range(6)]
            nearest = sorted(range(6), key=lambda j: d2[j])[:3]
            assert i in nearest                                        # itself included
            values = torch.stack([msg[b, j] * math.exp(-10 * d2[j]) for j in nearest])
            agg = torch.cat([values.mean(0), values.max(0).values])
            expected[b, i] = layer.output(torch.cat([with_means[b, i], agg]).unsqueeze(0))[0]
    return expected


def test_self_attention_matches_explicit_formula_and_saves_no_n_by_n_tensor():
    torch.manual_seed(1)
    att = GraphSelfAttention(10, 4)
    x = torch.randn(3, 300, 10)
    q, k, v = att.query(x), att.key(x), att.value(x)
    expected = x + att.proj(torch.softmax(q @ k.transpose(1, 2) / 2.0, -1) @ v)
    torch.testing.assert_close(att(x, 'dense'), expected, atol=1e-5, rtol=1e-5)
    shapes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
        out = att(x.requires_grad_(True), 'efficient')
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert not [s for s in shapes if s.count(300) >= 2], shapes           # no (.., N, N) saved
    out.sum().backward()


@pytest.mark.parametrize('channels,attn', [(8, 12), (12, 12), (10, 3)])
def test_attention_padding_handles_any_widths(channels, attn):
    torch.manual_seed(2)
    att = GraphSelfAttention(channels, attn).double()
    x = torch.randn(2, 7, channels, dtype=torch.float64)
    torch.testing.assert_close(att(x, 'efficient'), att(x, 'dense'))


def test_collapse_pools_mean_and_max():
    torch.manual_seed(3)
    collapse = AttentionCollapse(6, attn_channels=0, out_channels=4)
    x = torch.randn(5, 9, 6)
    y = collapse.final(x)
    out = collapse(x)
    assert out.shape == (5, 8)
    torch.testing.assert_close(out, torch.cat([y.mean(1), y.amax(1)], 1))


def test_feature_standardizer_chunked_statistics_and_modes():
    norm = FeatureStandardizer(3, log_features=(1,), stats_chunk_rows=7)
    x = torch.rand(4, 10, 3) + 0.1
    t = x.clone()
    t[..., 1] = torch.log(t[..., 1] + 1e-6)
    var, mean = torch.var_mean(t.reshape(-1, 3), 0, unbiased=False)
    out = norm(x)
    torch.testing.assert_close(out, (t - mean) / torch.sqrt(var + 1e-5), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(norm.running_mean, 0.1 * mean, atol=1e-6, rtol=1e-5)
    norm.eval()
    scale, shift = norm.params(x)
    torch.testing.assert_close(scale, torch.rsqrt(norm.running_var + 1e-5))
    with pytest.raises(ValueError, match='expected 3 features'):
        norm.params(torch.rand(2, 4))
    with pytest.raises(ValueError, match=r'log_features \[5\] are outside \[0, 3\)'):
        FeatureStandardizer(3, log_features=(5,))


def test_balanced_weights():
    block = torch.tensor([[True, False, False, False], [False, False, False, False]])
    w = balanced_voxel_weights(block)
    torch.testing.assert_close(w, torch.tensor([[0.5, 1 / 6, 1 / 6, 1 / 6], [0.25] * 4]))


def test_heads_losses_and_predictions():
    torch.manual_seed(4)
    x = torch.randn(2, 5, 80)
    targets = dict(labels=torch.tensor([[0, 1, 1, 1, 1], [2, 2, 3, 3, 3]]),
                   block_mask=torch.tensor([[True, False, False, False, False], [True, True, False, False, False]]),
                   x0=torch.rand(2, 5) + 0.01)
    cls = VoxelClassHead(80, num_classes=5)
    out = cls(x)
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(2, 5))
    nll = -out.gather(2, targets['labels'].unsqueeze(-1)).squeeze(-1)
    expected = (nll * balanced_voxel_weights(targets['block_mask'])).sum(1).mean()
    torch.testing.assert_close(cls.loss(out, targets)['loss_cls'], expected)
    pred = cls.predict(out)
    assert pred[0]['pts_semantic_mask'].shape == (5,) and pred[0]['pts_scores'].shape == (5, 5)
    with pytest.raises(ValueError, match=r'labels must lie in \[0, 5\)'):
        cls.loss(out, dict(targets, labels=targets['labels'] + 3))
    reg = VoxelX0Head(80)
    out = reg(x)
    assert out.shape == (2, 5)
    assert reg.loss(out, targets)['loss_x0'] > 0
    with pytest.raises(ValueError, match='x0 must be > 0'):
        reg.loss(out, dict(targets, x0=targets['x0'] - 5))
