"""Export-time BatchNorm folding (fsdlite.deploy.folding): same outputs as the unfolded module, the original left
unchanged, every foldable norm folded."""
import pytest
import torch
from torch import nn

from fsdlite.deploy.folding import fold_batch_norms
from fsdlite.models.layers.mlp import LinearNormAct, build_mlp
from fsdlite.models.layers.sparse_conv import RulebookSparseConv3d, conv_module_forward
from fsdlite.ops import subm_offset_pairs


def _norms(module):
    return [n for n, m in module.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def test_mlp_folded_copy_computes_the_same_and_leaves_the_original(randomize_norms):
    torch.manual_seed(0)
    mlp = randomize_norms(build_mlp(6, (8, 5), out_channels=3), 1).eval()
    before = {k: v.clone() for k, v in mlp.state_dict().items()}
    x = torch.randn(40, 6)
    folded = fold_batch_norms(mlp)
    assert folded.folded == ['0.norm', '1.norm'] and _norms(folded.module) == []
    with torch.no_grad():
        assert torch.allclose(folded.module(x), mlp(x), atol=1e-5)
    assert all(torch.equal(v, before[k]) for k, v in mlp.state_dict().items())  # the original is unchanged
    assert _norms(mlp) == ['0.norm', '1.norm']


def test_linear_with_bias_and_gathered_concat(randomize_norms):
    torch.manual_seed(1)
    layer = LinearNormAct(5, 4)
    layer.linear.bias = nn.Parameter(torch.randn(4))  # a bias before the norm is folded too
    layer = randomize_norms(layer, 2).eval()
    folded = fold_batch_norms(layer).module
    x, groups, index = torch.randn(12, 3), torch.randn(4, 2), torch.randint(0, 4, (12,))
    with torch.no_grad():
        assert torch.allclose(folded(torch.cat([x, groups[index]], 1)), layer(torch.cat([x, groups[index]], 1)),
                              atol=1e-5)
        assert torch.allclose(folded.forward_gathered_concat(x, groups, index, lambda t, i: t[i]),
                              layer.forward_gathered_concat(x, groups, index, lambda t, i: t[i]), atol=1e-5)


@pytest.mark.parametrize('kernel_size', [3, 1])  # 1: spconv's 1x1 weight layout (reinterpreted, not transposed)
def test_sparse_conv_block_folds_into_the_conv_weight(kernel_size, randomize_norms):
    torch.manual_seed(2)
    block = randomize_norms(nn.Sequential(RulebookSparseConv3d(3, 6, kernel_size, subm=True, bias=False),
                                          nn.BatchNorm1d(6, eps=1e-3), nn.ReLU(inplace=True)), 3).eval()
    coors = torch.unique(torch.cat([torch.zeros(60, 1, dtype=torch.long), torch.randint(0, 5, (60, 3))], 1), dim=0)
    kmap = subm_offset_pairs(coors, (5, 5, 5), (kernel_size,) * 3, (1, 1, 1))
    x = torch.randn(len(coors), 3)

    def run(seq):
        out = conv_module_forward(seq[0], x, kmap)
        for module in list(seq)[1:]:
            out = module(out)
        return out

    folded = fold_batch_norms(block)
    assert folded.folded == ['1'] and isinstance(folded.module[1], nn.Identity)
    assert folded.module[0].bias is not None and block[0].bias is None
    assert not folded.module[2].inplace and block[2].inplace  # no in-place write into a slice of the conv's buffer
    with torch.no_grad():
        assert torch.allclose(run(folded.module), run(block), atol=1e-5)


def test_norms_that_are_not_affine_or_not_after_a_linear_map_stay(randomize_norms):
    torch.manual_seed(3)
    seq = randomize_norms(nn.Sequential(nn.ReLU(), nn.BatchNorm1d(4), nn.Linear(4, 4), nn.BatchNorm1d(4)), 4).eval()
    seq[3].train()  # batch statistics: not an affine map
    folded = fold_batch_norms(seq)
    assert folded.folded == [] and _norms(folded.module) == ['1', '3']
