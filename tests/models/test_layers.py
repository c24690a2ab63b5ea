"""Generic layers: norm/act builders, MLP blocks, channel specs, sparse conv builders, voxel geometry."""
import pytest
import torch
from torch import nn

from fsdlite.models.layers.builder import build_module
from fsdlite.models.layers.channels import channel_tuple, stage_channels
from fsdlite.models.layers.bn_fold import layer_by_layer
from fsdlite.models.layers.mlp import LinearNormAct, build_mlp
from fsdlite.models.layers.norm_act import build_act, build_norm
from fsdlite.models.layers.sparse_block import build_sparse_conv, sparse_conv_block
from fsdlite.models.layers.sparse_tensor import SparseTensor
from fsdlite.models.layers.voxel_geometry import voxel_centers, voxel_grid


def test_norm_act_builders():
    bn = build_norm(dict(type='BN1d', eps=1e-3, momentum=0.01), 8)
    assert isinstance(bn, nn.BatchNorm1d) and bn.eps == 1e-3 and bn.momentum == 0.01
    assert isinstance(build_norm(dict(type='LN'), 8), nn.LayerNorm)
    assert isinstance(build_norm(None, 8), nn.Identity)
    assert isinstance(build_act(dict(type='GELU')), nn.GELU)
    assert isinstance(build_act(None), nn.Identity)
    cfg = dict(type='BN1d', eps=1e-3)
    build_norm(cfg, 4)
    assert cfg == dict(type='BN1d', eps=1e-3)  # caller's config untouched
    with pytest.raises(TypeError, match='norm_cfg'):
        build_norm('BN1d', 4)
    with pytest.raises(TypeError, match='act_cfg'):
        build_act(dict(inplace=True))


def test_mlp_shapes_and_bias():
    mlp = build_mlp(5, (8, 16), out_channels=3)
    assert mlp(torch.randn(7, 5)).shape == (7, 3)
    assert isinstance(mlp[0], LinearNormAct) and mlp[0].linear.bias is None  # norm follows: no bias
    assert mlp[-1].bias is not None
    plain = LinearNormAct(4, 6, norm_cfg=None, act_cfg=None)
    x = torch.randn(3, 4)
    assert torch.allclose(plain(x), plain.linear(x))
    assert len(build_mlp(4, ())) == 0


@pytest.mark.parametrize('norm_cfg, act_cfg', [(dict(type='LN'), dict(type='GELU')), (None, None)])
def test_gathered_concat_equals_the_concatenation(norm_cfg, act_cfg):
    """layer(cat([x, g[index]])) computed on the G group rows before the gather, bias (no norm) included; a dump
    index (gathering zeros) gets no group contribution, as with the concatenation."""
    torch.manual_seed(0)
    layer = LinearNormAct(5 + 3, 6, norm_cfg=norm_cfg, act_cfg=act_cfg).eval()
    x, group = torch.randn(40, 5), torch.randn(7, 3)
    index = torch.randint(0, 8, (40,))  # 7 = the dump slot

    def gather(t, idx):
        return torch.cat([t, t.new_zeros(1, t.shape[1])]).index_select(0, idx)

    expected = layer(torch.cat([x, gather(group, index)], 1))
    assert torch.allclose(layer.forward_gathered_concat(x, group, index, gather), expected, atol=1e-6)
    calls = []
    layer.linear.register_forward_hook(lambda *args: calls.append(1))
    layer.forward_gathered_concat(x, group, index, gather)
    assert not calls  # the linear layer's weight is read functionally...
    with layer_by_layer():
        assert torch.equal(layer.forward_gathered_concat(x, group, index, gather), expected)
    assert calls == [1]  # ...except inside layer_by_layer, where the layer itself runs on the concatenation
    with pytest.raises(ValueError, match=r'x \(5 channels\) and group_feats \(2\) must add up to in_channels=8'):
        layer.forward_gathered_concat(x, group[:, :2], index, gather)


def test_channel_specs():
    assert channel_tuple('c', [4, 8]) == (4, 8)
    assert stage_channels('enc', [[16], (32, 32)]) == ((16,), (32, 32))
    for bad in ('16', 16, [0], [1.5], [True]):
        with pytest.raises((TypeError, ValueError), match='c'):
            channel_tuple('c', bad)
    with pytest.raises(ValueError, match=r'dec\[0\] must have 3 entries'):
        stage_channels('dec', [(1, 2)], length=3)
    with pytest.raises(ValueError, match='at least one stage'):
        stage_channels('enc', [])
    with pytest.raises(ValueError, match=r'enc\[1\] must not be empty'):
        stage_channels('enc', [(4,), ()])


def test_voxel_grid_and_centers():
    vs, pr, shape = voxel_grid((0.5, 0.5, 1.0), (0, -4, -2, 8, 4, 2))
    assert shape == (4, 16, 16) and vs == (0.5, 0.5, 1.0) and pr == (0.0, -4.0, -2.0, 8.0, 4.0, 2.0)
    coors = torch.tensor([[0, 0, 0, 0], [1, 3, 15, 15]])
    centers = voxel_centers(coors, vs, pr)
    assert torch.allclose(centers, torch.tensor([[0.25, -3.75, -1.5], [7.75, 3.75, 1.5]]))
    assert voxel_centers(coors, vs, pr, dtype=torch.float64).dtype == torch.float64
    with pytest.raises(ValueError, match='voxel_size'):
        voxel_grid((0.5, -1, 1), (0, 0, 0, 1, 1, 1))
    with pytest.raises(ValueError, match='point_range'):
        voxel_grid((0.5, 0.5, 0.5), (0, 0, 0, -1, 1, 1))


def test_sparse_conv_builders_match_dense_conv():
    torch.manual_seed(0)
    block = sparse_conv_block('SubMConv3d', 2, 3, indice_key='k', norm_cfg=None, act_cfg=None)
    conv = block[0]
    assert conv.bias is not None  # no norm: the conv keeps its bias
    assert block[0].geometry.kind == 'subm'
    coors = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 2], [0, 2, 2, 2]])
    feats = torch.randn(3, 2)
    out = block(SparseTensor(feats, coors, (4, 4, 4), 1)).features
    dense_in = torch.zeros(1, 2, 4, 4, 4)
    dense_in[0, :, coors[:, 1], coors[:, 2], coors[:, 3]] = feats.t()
    weight = conv.weight.permute(0, 4, 1, 2, 3)  # spconv (out, kz, ky, kx, in) -> (out, in, kz, ky, kx)
    dense = torch.nn.functional.conv3d(dense_in, weight, conv.bias, padding=1)
    assert torch.allclose(out, dense[0, :, coors[:, 1], coors[:, 2], coors[:, 3]].t(), atol=1e-5)
    with pytest.raises(ValueError, match='conv_type'):
        build_sparse_conv('Conv3d', 2, 3)
    with pytest.raises(ValueError, match='indice_key'):
        build_sparse_conv('SparseInverseConv3d', 2, 3)
    with pytest.raises(ValueError, match=r'coords must be an integer \(N, 4\)'):
        SparseTensor(feats, coors[:, :3], (4, 4, 4), 1)


def test_build_module_fills_only_accepted_defaults():
    neck = build_module(dict(type='Voxel2PointNeck'), in_channels=8, voxel_size=(1, 1, 1),
                        point_range=(0, 0, 0, 4, 4, 4), unrelated=3)
    assert neck.in_channels == 8 and neck.out_channels == 11
    explicit = build_module(dict(type='Voxel2PointNeck', in_channels=5), in_channels=8, voxel_size=(1, 1, 1),
                            point_range=(0, 0, 0, 4, 4, 4))
    assert explicit.in_channels == 5  # the config wins over the default
    with pytest.raises(KeyError, match='Voxel2PointNek'):
        build_module(dict(type='Voxel2PointNek'))
    with pytest.raises(TypeError, match='type'):
        build_module(dict(in_channels=3))
