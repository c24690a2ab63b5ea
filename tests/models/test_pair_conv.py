"""Pair lists (fsdlite.models.layers.pair_conv) run as tiled kernel maps by ``layers.sparse_conv.sparse_conv``:
equality with the dense kernel-map conv
(itself tested against spconv and F.conv3d), pair-list properties, bounds (raise / truncate and count),
gradients, bad inputs, a SparseUNet run on pair lists, ONNX export to Gather / MatMul / ScatterND."""
import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.deploy.onnx_io import export_graph
from fsdlite.deploy.translations import custom_translations
from fsdlite.models.lidar import SparseUNet
from fsdlite.models.layers import sparse_conv as sparse_conv_module
from fsdlite.models.layers.pair_conv import pairs_from_nbr, traced_pairs
from fsdlite.models.layers.rulebook_conv import build_rulebook, inverse_rulebook, kernel_matrices
from fsdlite.models.layers.sparse_conv import PAIR_TILE, KernelMap, RulebookSparseConv3d, pair_capacity, sparse_conv
from fsdlite.ops import rulebook_pairs
from fsdlite.structures.bounds import BoundExceededError


def pair_conv(feats, pairs, weight, num_out, bias=None, one_by_one=False, tile=PAIR_TILE):
    """:func:`sparse_conv` over a (3, P) pair list read as a tiled kernel map, spconv's weight layout."""
    kmap = KernelMap.tiled(pairs, feats.shape[0], num_out, tile)
    return sparse_conv(feats, kmap, kernel_matrices(weight, one_by_one), bias)


def random_map(vout, vin, kv, fill, seed):
    """(vout, kv) neighbour map with about ``fill`` real entries, dump = vin."""
    g = torch.Generator().manual_seed(seed)
    nbr = torch.randint(0, vin, (vout, kv), generator=g)
    return torch.where(torch.rand(vout, kv, generator=g) < fill, nbr, torch.full_like(nbr, vin))


def export_and_run(module, args, path):
    """Export ``module(*args)`` to ONNX (standard ops), run it in ONNX Runtime: (op types, ORT outputs, PyTorch
    outputs as a tuple)."""
    with torch.no_grad():
        torch.onnx.export(module.eval(), args, str(path), dynamo=True, opset_version=18, external_data=False,
                          custom_translation_table=custom_translations())
        expected = module(*args)
    graph = onnx.load(str(path)).graph
    assert all(n.domain in ('', 'ai.onnx') for n in graph.node)
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})
    return {n.op_type for n in graph.node}, got, expected if isinstance(expected, tuple) else (expected,)


def real_pairs(nbr, vin):
    k, o = (nbr < vin).t().nonzero(as_tuple=True)
    return {(int(i), int(j), int(kk)) for i, j, kk in zip(nbr[o, k], o, k)}


@settings(max_examples=30, deadline=None)
@given(vout=st.integers(1, 300), vin=st.integers(1, 300), kv=st.sampled_from([1, 8, 27]),
       fill=st.floats(0.0, 1.0), tile=st.sampled_from([1, 4, 128]), seed=st.integers(0, 2 ** 16))
def test_pair_list_holds_every_real_pair_once_grouped_by_offset(vout, vin, kv, fill, tile, seed):
    nbr = random_map(vout, vin, kv, fill, seed)
    needed = int((nbr < vin).sum())
    pl = pairs_from_nbr(nbr, vin, max(needed, 1), tile=tile)
    assert pl.pairs.shape == (3, pair_capacity(max(needed, 1), kv, tile)) and pl.pairs.shape[1] % tile == 0
    assert int(pl.num_pairs) == needed and int(pl.num_dropped) == 0
    ins, outs, offs = pl.pairs
    real = ins < vin
    assert torch.equal(real, outs < vout)  # a slot is a real pair in both rows or the dump in both
    got = [(int(i), int(o), int(k)) for i, o, k in zip(ins[real], outs[real], offs[real])]
    assert len(got) == needed and set(got) == real_pairs(nbr, vin)
    assert (offs.view(-1, tile) == offs.view(-1, tile)[:, :1]).all()  # one kernel offset per tile


@settings(max_examples=25, deadline=None)
@given(vout=st.integers(0, 200), vin=st.integers(1, 200), fill=st.floats(0.0, 1.0), tiles=st.integers(0, 40),
       tile=st.sampled_from([1, 4, 128]), seed=st.integers(0, 2 ** 16))
def test_traced_pairs_equal_the_op(vout, vin, fill, tiles, tile, seed):
    """The fixed-shape compaction (maps built inside a graph) gives the op's list, truncation included."""
    nbr = random_map(vout, vin, 27, fill, seed)
    for a, b in zip(traced_pairs(nbr, vin, tiles * tile, tile), rulebook_pairs(nbr, vin, tiles * tile, tile)):
        assert torch.equal(a, b)


def test_pairs_from_nbr_exports_inside_a_graph(tmp_path):
    """An in-graph rulebook's map turned into a pair list and convolved, in ONNX Runtime as in PyTorch."""
    conv = RulebookSparseConv3d(4, 6, 3, subm=True)

    class Graph(torch.nn.Module):
        def forward(self, feats, nbr):
            pl = pairs_from_nbr(nbr, 120, 500, tile=8, strict=False)
            return pair_conv(feats, pl.pairs, conv.weight, 100, conv.bias, tile=8), pl.num_dropped

    nbr, feats = random_map(100, 120, 27, 0.3, seed=9), torch.randn(120, 4)
    types, got, expected = export_and_run(Graph(), (feats, nbr), tmp_path / 'graph_pairs.onnx')
    assert not {'NonZero', 'Unique', 'Loop', 'If'} & types, types
    np.testing.assert_allclose(got[0], expected[0].numpy(), rtol=0, atol=1e-4)
    assert int(got[1]) == int(expected[1]) > 0  # ~810 pairs > 696 rows: the overflow is counted in the graph


@pytest.mark.parametrize('one_by_one', [False, True])
def test_matches_the_neighbour_map_conv_float64(one_by_one):
    kv = 1 if one_by_one else 27
    nbr = random_map(70, 90, kv, 0.3, seed=1)
    g = torch.Generator().manual_seed(2)
    feats = torch.randn(90, 5, generator=g, dtype=torch.float64)
    weight = torch.randn(7, *((1, 1, 1) if one_by_one else (3, 3, 3)), 5, generator=g, dtype=torch.float64)
    bias = torch.randn(7, generator=g, dtype=torch.float64)
    pl = pairs_from_nbr(nbr, 90, int((nbr < 90).sum()) + 17)
    got = pair_conv(feats, pl.pairs, weight, 70, bias, one_by_one=one_by_one)
    expected = sparse_conv(feats, KernelMap.dense(nbr, 90), kernel_matrices(weight, one_by_one), bias)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('chunk_bytes', [1, 3 * 5 * 8 * 8, 2 ** 30])  # 1 tile, 3 (the last chunk short), all
def test_chunks_of_tiles_give_the_same_conv(chunk_bytes, monkeypatch):
    """The tiled conv runs its tiles in chunks (layers.sparse_conv.chunk_tiles); any chunk size, the same result."""
    monkeypatch.setattr(sparse_conv_module, 'CHUNK_BYTES', chunk_bytes)
    nbr = random_map(70, 90, 27, 0.3, seed=3)
    g = torch.Generator().manual_seed(4)
    feats = torch.randn(90, 5, generator=g, dtype=torch.float64)
    weight = torch.randn(7, 3, 3, 3, 5, generator=g, dtype=torch.float64)
    pl = pairs_from_nbr(nbr, 90, int((nbr < 90).sum()), tile=8)
    assert sparse_conv_module.chunk_tiles(5, 8, 8) == max(1, chunk_bytes // (5 * 8 * 8))
    got = pair_conv(feats, pl.pairs, weight, 70, tile=8)
    expected = sparse_conv(feats, KernelMap.dense(nbr, 90), kernel_matrices(weight))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_strided_and_inverse_convs_on_real_rulebooks():
    """A strided conv and its inverse (the strided pairs with input and output swapped) equal the map convs."""
    g = torch.Generator().manual_seed(0)
    coors = torch.nonzero(torch.rand(2, 6, 9, 8, generator=g) < 0.3)
    n = coors.shape[0]
    padded = torch.cat([coors, torch.zeros(5, 4, dtype=torch.long)])
    feats = torch.randn(n + 5, 3, generator=g)
    down = RulebookSparseConv3d(3, 4, 3, 2, 1, indice_key='d')
    up = RulebookSparseConv3d(4, 3, 3, indice_key='d', inverse=True)
    rb = build_rulebook(down, padded, n, (6, 9, 8), max_out=2 * n)
    inv = inverse_rulebook(rb, padded, n)
    pl = pairs_from_nbr(rb.nbr, n + 5, int((rb.nbr < n + 5).sum()))
    mid = pair_conv(feats, pl.pairs, down.weight, 2 * n, down.bias)
    torch.testing.assert_close(mid, down(feats, KernelMap.dense(rb.nbr, n + 5)), rtol=1e-5, atol=1e-5)
    back = pair_conv(mid, pl.pairs[[1, 0, 2]], up.weight, n + 5, up.bias)
    torch.testing.assert_close(back, up(mid, KernelMap.dense(inv.nbr, 2 * n)), rtol=1e-5, atol=1e-5)


def test_bound_raises_or_truncates_and_counts():
    nbr = random_map(200, 150, 27, 0.2, seed=4)
    needed = int((nbr < 150).sum())
    with pytest.raises(BoundExceededError, match=rf'bound max_pairs\[3\] exceeded: needed {needed}, allowed 10'):
        pairs_from_nbr(nbr, 150, 10, bound_name='max_pairs[3]')
    pl = pairs_from_nbr(nbr, 150, 10, tile=4, strict=False)  # small tiles: little slack beyond the bound
    kept = int((pl.pairs[0] < 150).sum())
    assert pl.pairs.shape[1] == pair_capacity(10, 27, 4) == 92 and int(pl.num_dropped) == needed - kept > 0
    assert {(int(i), int(o), int(k)) for i, o, k in pl.pairs.t() if i < 150} <= real_pairs(nbr, 150)


def test_gradcheck_float64():
    nbr = random_map(12, 10, 27, 0.4, seed=5)
    pl = pairs_from_nbr(nbr, 10, 200, tile=8)
    feats = torch.randn(10, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(4, 3, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda f, w, b: pair_conv(f, pl.pairs, w, 12, b, tile=8), (feats, weight, bias))


def test_invalid_arguments():
    nbr = random_map(20, 15, 27, 0.3, seed=6)
    pairs = pairs_from_nbr(nbr, 15, 300).pairs
    weight = torch.randn(4, 3, 3, 3, 2)
    with pytest.raises(ValueError, match=r'x must have shape \(Vin, 2\)'):
        pair_conv(torch.randn(15, 3), pairs, weight, 20)
    with pytest.raises(ValueError, match='pair list must have shape'):
        pair_conv(torch.randn(15, 2), pairs[:, :5], weight, 20)
    with pytest.raises(ValueError, match=r'pairs\[1\] \(output rows\) contains 20, expected values in \[0, 11\)'):
        pair_conv(torch.randn(15, 2), pairs, weight, 10)
    with pytest.raises(ValueError, match=r'pairs\[0\] \(input rows\) contains 1[0-5], expected values in \[0, 10\)'):
        pair_conv(torch.randn(9, 2), pairs, weight, 20)
    with pytest.raises(RuntimeError, match=r'nbr \(input rows; num_in is the dump\) contains 15, expected values in'):
        pairs_from_nbr(nbr, 10, 300)
    with pytest.raises(ValueError, match='nbr must be a'):
        pairs_from_nbr(nbr.float(), 15, 300)
    with pytest.raises(ValueError, match='max_pairs must be >= 0 and kernel_volume >= 1'):
        pair_capacity(-1, 27)
    with pytest.raises(ValueError, match='max_pairs must be >= 0 and kernel_volume >= 1'):
        pair_capacity(5, 0)


def test_sparse_unet_runs_the_same_on_pair_lists():
    unet = SparseUNet(5, (1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 12.0, 12.0, 8.0), base_channels=4,
                      encoder_channels=((4,), (8, 8), (8,)), decoder_channels=((8, 8, 8), (8, 8, 4), (4, 4, 6))).eval()
    g = torch.Generator().manual_seed(7)
    keys = torch.randperm(2 * 8 * 12 * 12, generator=g)[:300]
    b, rest = keys // (8 * 12 * 12), keys % (8 * 12 * 12)
    coors = torch.stack([b, rest // 144, (rest // 12) % 12, rest % 12], 1)
    levels = [320, 300, 200]
    padded = torch.cat([coors, torch.zeros(20, 4, dtype=torch.long)])
    feats = torch.randn(320, 5, generator=g)
    plan = unet.conv_plan()
    with torch.no_grad():
        nbrs, _, _ = plan.build_rulebooks(padded, 300, levels)
        needed = plan.count_pairs(nbrs, levels)
        lists, dropped = plan.build_pair_lists(nbrs, levels, needed.tolist())
        assert len(lists) == len(nbrs) and int(dropped.sum()) == 0
        dense = unet(feats, kernel_maps=plan.dense_kernel_maps(nbrs, levels))
        paired = unet(feats, kernel_maps=plan.tiled_kernel_maps(lists, levels))
        eager = unet(feats[:300], coors, 2)
    torch.testing.assert_close(paired[:300], dense[:300], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(paired[:300], eager, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match='max_pairs needs 5 entries'):
        plan.build_pair_lists(nbrs, levels, [100])
    # the pre-ops leave the inverse maps out: same counts, same pair lists
    lean, _, _ = plan.build_rulebooks(padded, 300, levels, inverse_maps=False)
    kinds = [kind for kind, *_ in plan.rulebook_layout(levels)]
    assert [m is None for m in lean] == [k == 'inverse' for k in kinds] and 'inverse' in kinds
    assert torch.equal(plan.count_pairs(lean, levels), needed)
    lean_lists, _ = plan.build_pair_lists(lean, levels, needed.tolist())
    assert all(torch.equal(a, b) for a, b in zip(lean_lists, lists))
    subm_missing = [None if k == 'subm' else m for k, m in zip(kinds, nbrs)]
    with pytest.raises(ValueError, match=r'the map of a subm conv \(slot 0\) is missing'):
        plan.build_pair_lists(subm_missing, levels, needed.tolist())


def test_onnx_export_uses_gather_matmul_scatternd(tmp_path):
    nbr = random_map(300, 250, 27, 0.15, seed=8)
    pairs = pairs_from_nbr(nbr, 250, 1500).pairs
    conv = RulebookSparseConv3d(8, 16, 3, subm=True)

    class Conv(torch.nn.Module):
        def forward(self, feats, pairs):
            return pair_conv(feats, pairs, conv.weight, 300, conv.bias)

    feats = torch.randn(250, 8)
    types, (got,), (expected,) = export_and_run(Conv(), (feats, pairs), tmp_path / 'pair_conv.onnx')
    assert {'Gather', 'MatMul', 'ScatterND'} <= types and 'ScatterElements' not in types, types
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-4)


def test_chunked_conv_exports_one_split_per_index_tensor(tmp_path, monkeypatch):
    """In chunks, the tiled conv's graph splits its pair and offset indices once (no Slice per chunk: the ONNX
    optimizer's Slice rules grow with the square of such nodes) and still matches PyTorch in ONNX Runtime."""
    monkeypatch.setattr(sparse_conv_module, 'CHUNK_BYTES', 8 * 8 * 4 * 2)  # 2 tiles of 8 rows per chunk
    nbr = random_map(120, 100, 27, 0.15, seed=9)
    pairs = pairs_from_nbr(nbr, 100, 600, tile=8).pairs
    conv = RulebookSparseConv3d(8, 16, 3, subm=True)

    class Conv(torch.nn.Module):
        def forward(self, feats, pairs):
            return pair_conv(feats, pairs, conv.weight, 120, conv.bias, tile=8)

    feats = torch.randn(100, 8)
    num_chunks = -(-pairs.shape[1] // 16)
    assert num_chunks > 20
    path = tmp_path / 'chunked.onnx'
    export_graph(Conv().eval(), (feats, pairs), path, ['feats', 'pairs'], ['out'])
    types = collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    assert types['Split'] <= 3 and types['Slice'] <= 2, types
    assert types['MatMul'] == num_chunks, types
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    got = session.run(None, {'feats': feats.numpy(), 'pairs': pairs.numpy()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, Conv()(feats, pairs).numpy(), rtol=0, atol=1e-4)
