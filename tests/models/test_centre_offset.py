"""A submanifold conv's centre offset (every row paired with itself) left out of the pair lists and run as one plain
product by the tiled conv (``KernelMap.identity_offset``): the same outputs on the real rows as the full map, the
lists and the pair counts without those pairs, ONNX Runtime == PyTorch, bad arguments."""
import onnx
import onnxruntime as ort
import pytest
import torch

from fsdlite.deploy.translations import custom_translations
from fsdlite.models.layers.conv_plan import ConvPlan, centre_offset
from fsdlite.models.layers.pair_conv import pairs_from_exact, pairs_from_nbr, without_offset_column
from fsdlite.models.layers.rulebook_conv import build_rulebook, conv_geometry
from fsdlite.models.layers.sparse_conv import KernelMap, RulebookSparseConv3d, sparse_conv
from fsdlite.ops import pairs_by_offset


def subm_case(seed=0, pad=6, kernel=3):
    """A submanifold conv on random voxels padded by ``pad`` rows: (conv, padded features, nbr, valid rows)."""
    g = torch.Generator().manual_seed(seed)
    coors = torch.nonzero(torch.rand(2, 6, 9, 8, generator=g) < 0.3)
    n = coors.shape[0]
    conv = RulebookSparseConv3d(3, 5, kernel, subm=True, indice_key='s')
    rb = build_rulebook(conv, torch.cat([coors, torch.zeros(pad, 4, dtype=torch.long)]), n, (6, 9, 8))
    return conv, torch.randn(n + pad, 3, generator=g), rb.nbr, n


@pytest.mark.parametrize('kind, kernel, expected', [('subm', 3, 13), ('subm', (1, 3, 3), 4), ('subm', 1, 0),
                                                    ('subm', 2, None), ('conv', 3, None), ('inverse', 3, None)])
def test_centre_offset_of_geometries(kind, kernel, expected):
    if kind == 'inverse':
        conv = RulebookSparseConv3d(4, 4, kernel, inverse=True, indice_key='k')
    else:
        conv = RulebookSparseConv3d(4, 4, kernel, stride=1 if kind == 'subm' else 2, subm=kind == 'subm')
    assert centre_offset(conv_geometry(conv)) == expected


@pytest.mark.parametrize('kernel', [3, 1])
def test_tiled_conv_runs_the_centre_as_one_product(kernel):
    conv, feats, nbr, n = subm_case(kernel=kernel)
    vin, centre = feats.shape[0], centre_offset(conv.geometry)
    assert torch.equal(nbr[:n, centre], torch.arange(n))  # the centre pairs every valid row with itself
    real = int((nbr < vin).sum())
    full = pairs_from_nbr(nbr, vin, real)
    lean = pairs_from_nbr(nbr, vin, real - n, skip_offset=centre)
    assert int(full.num_pairs) == real and int(lean.num_pairs) == real - n and int(lean.num_dropped) == 0
    listed = lean.pairs[:, lean.pairs[0] < vin]
    assert not bool((listed[2] == centre).any()) and listed.shape[1] == real - n
    exact = pairs_by_offset(nbr, vin)
    assert torch.equal(pairs_from_exact(exact, vin, vin, real - n, skip_offset=centre).pairs, lean.pairs)
    with torch.no_grad():
        expected = conv(feats, KernelMap.dense(nbr, vin))
        got = conv(feats, KernelMap.tiled(lean.pairs, vin, vin, identity_offset=centre))
        without = conv(feats, KernelMap.tiled(lean.pairs, vin, vin))
    torch.testing.assert_close(got[:n], expected[:n], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(without[:n], expected[:n], atol=1e-3)  # the centre's product is in the result
    # padding rows are multiplied too (an isolated voxel's result); nothing reads them
    torch.testing.assert_close(got[n:], feats[n:] @ conv.matrices()[centre] + conv.bias)


def test_identity_offset_gradients_float64():
    conv, feats, nbr, n = subm_case(seed=3, pad=2)
    conv = conv.double()
    vin, centre = feats.shape[0], centre_offset(conv.geometry)
    kmap = KernelMap.tiled(pairs_from_nbr(nbr, vin, int((nbr < vin).sum()), tile=8, skip_offset=centre).pairs, vin, vin, tile=8,
                           identity_offset=centre)
    feats = feats.double().requires_grad_()
    weight = conv.matrices().detach().requires_grad_()
    bias = conv.bias.detach().double().requires_grad_()
    assert torch.autograd.gradcheck(lambda f, w, b: sparse_conv(f, kmap, w, b), (feats, weight, bias))


def test_plan_lists_and_counts_leave_the_centre_out():
    """ConvPlan's submanifold maps: tiled maps name their centre, the counts are the real pairs less one per voxel
    (both ways of counting agree), the lists from the exact maps equal those from the neighbour maps."""
    convs = [(RulebookSparseConv3d(3, 4, 3, subm=True, indice_key='a'), 0),
             (RulebookSparseConv3d(4, 4, 3, stride=2, padding=1, indice_key='d'), 1),
             (RulebookSparseConv3d(4, 4, 3, subm=True, indice_key='b'), 1),
             (RulebookSparseConv3d(4, 4, 3, inverse=True, indice_key='d'), 1)]
    plan = ConvPlan(convs, (6, 9, 8), 2)
    g = torch.Generator().manual_seed(1)
    coors = torch.nonzero(torch.rand(1, 6, 9, 8, generator=g) < 0.3)
    n, levels = coors.shape[0], [coors.shape[0] + 4, coors.shape[0]]
    padded = torch.cat([coors, torch.zeros(4, 4, dtype=torch.long)])
    nbrs, counts, _ = plan.build_rulebooks(padded, n, levels)
    needed = plan.count_pairs(nbrs, levels)
    exact, _ = plan.exact_kernel_maps(coors)
    assert torch.equal(plan.exact_pair_counts(exact), needed)
    assert int(needed[0]) == int((nbrs[0] < levels[0]).sum()) - n
    assert int(needed[2]) == int((nbrs[2] < levels[1]).sum()) - int(counts[1])
    assert int(needed[1]) == int((nbrs[1] < levels[0]).sum())  # a strided conv keeps every pair
    lists, dropped = plan.build_pair_lists(nbrs, levels, needed.tolist())
    from_exact, _ = plan.pair_lists_from_exact(exact, levels, needed.tolist())
    assert int(dropped.sum()) == 0 and all(torch.equal(a, b) for a, b in zip(lists, from_exact))
    maps = plan.tiled_kernel_maps(lists, levels)
    assert [m.identity_offset for m in maps] == [13, None, 13, None]


def test_identity_offset_exports_as_a_plain_matmul(tmp_path):
    conv, feats, nbr, n = subm_case(seed=5)
    vin, centre = feats.shape[0], centre_offset(conv.geometry)
    pairs = pairs_from_nbr(nbr, vin, int((nbr < vin).sum()), skip_offset=centre).pairs

    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = conv

        def forward(self, x, pair_list):
            return self.conv(x, KernelMap.tiled(pair_list, vin, vin, identity_offset=centre))

    path = tmp_path / 'centre.onnx'
    with torch.no_grad():
        torch.onnx.export(Conv().eval(), (feats, pairs), str(path), dynamo=True, opset_version=18,
                          external_data=False, custom_translation_table=custom_translations())
        expected = Conv()(feats, pairs)
    assert {'MatMul', 'Gemm'} & {node.op_type for node in onnx.load(str(path)).graph.node}
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    got = session.run(None, {'x': feats.numpy(), 'pair_list': pairs.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-5, atol=1e-5)


def test_bad_identity_arguments():
    conv, feats, nbr, n = subm_case(seed=2)
    vin = feats.shape[0]
    pairs = pairs_from_nbr(nbr, vin, int((nbr < vin).sum()), skip_offset=13).pairs
    with pytest.raises(ValueError, match=r'identity_offset \(13\) pairs every row with itself, so num_in must equal'):
        KernelMap.tiled(pairs, vin, vin + 1, identity_offset=13)
    with pytest.raises(ValueError, match=r'identity_offset 27 needs an offset in \[0, 27\)'):
        conv(feats, KernelMap.tiled(pairs, vin, vin, identity_offset=27))
    with pytest.raises(ValueError, match=r'skip_offset must be a kernel offset in \[0, 27\), got 27'):
        pairs_from_nbr(nbr, vin, 2000, skip_offset=27)
    with pytest.raises(ValueError, match=r'skip_offset must be a kernel offset in \[0, 27\), got -1'):
        pairs_from_exact(pairs_by_offset(nbr, vin), vin, vin, 2000, skip_offset=-1)
    with pytest.raises(ValueError, match=r'skip_offset must be a kernel offset in \[0, 27\), got 30'):
        without_offset_column(nbr, vin, 30)
