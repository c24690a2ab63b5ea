"""Export-safe static helpers: equality with the dynamic ops (fsdlite.ops.segment_reduce, fsdlite.ops.voxelize,
torch.unique) on random data and on the real KITTI frame (open-mmlab/mmdetection3d@fe25f7a:demo/data/kitti/
000008.bin), bound overflow, and an ONNX round trip (standard ops only, no Unique/NonZero, ORT == PyTorch)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.models.layers.static_ops import (gather_rows, masked_topk, static_segment_reduce, static_unique,
                                              static_voxelize)
from fsdlite.deploy.translations import custom_translations
from fsdlite.ops import segment_reduce, voxelize
from fsdlite.structures.bounds import BoundExceededError

KITTI_SIZE, KITTI_RANGE = [0.2, 0.2, 0.2], [0, -40, -3, 70.4, 40, 1]


def kitti_points(shared_data):
    path = shared_data / 'kitti_object_000008' / '000008.bin'
    return torch.from_numpy(np.fromfile(path, np.float32).reshape(-1, 4))


# ------------------------------------------------------------------------------------ segment reduce
@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max', 'min'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.int64])
def test_segment_reduce_matches_dynamic_op(reduce, dtype):
    g = torch.Generator().manual_seed(0)
    src = (torch.randn(300, 5, generator=g) * 10).to(dtype)
    index = torch.randint(0, 40, (300,), generator=g)
    index[index == 7] = 8  # an empty segment
    valid = torch.rand(300, generator=g) < 0.8
    out = static_segment_reduce(src, index, 40, reduce, valid=valid)
    ref = segment_reduce(src[valid], index[valid], 40, reduce)
    assert out.dtype == dtype and out.shape == (40, 5)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-5)
    assert bool((out[7] == 0).all())
    # dump-slot indices are equivalent to the valid mask
    dumped = static_segment_reduce(src, torch.where(valid, index, torch.full_like(index, 40)), 40, reduce)
    assert torch.equal(dumped, out)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 60), st.integers(1, 12), st.sampled_from(['sum', 'mean', 'max', 'min']), st.integers(0, 99))
def test_segment_reduce_properties(n, m, reduce, seed):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(-3, 4, (n, 2), generator=g).double()  # many ties
    index = torch.randint(0, m + 1, (n,), generator=g)        # some rows to the dump slot m
    out = static_segment_reduce(src, index, m, reduce)
    keep = index < m
    torch.testing.assert_close(out, segment_reduce(src[keep], index[keep], m, reduce))


def test_segment_reduce_invalid_arguments():
    with pytest.raises(ValueError, match=r'index contains 6, expected values in \[0, 6\)'):
        static_segment_reduce(torch.ones(2, 1), torch.tensor([0, 6]), 5, 'sum')
    with pytest.raises(ValueError, match="reduce must be one of"):
        static_segment_reduce(torch.ones(2, 1), torch.tensor([0, 1]), 5, 'prod')
    with pytest.raises(ValueError, match=r'index must have shape \(N,\) = \(2,\)'):
        static_segment_reduce(torch.ones(2, 1), torch.tensor([0, 1, 2]), 5, 'sum')


# --------------------------------------------------------------------------------------------- unique
def first_occurrence_unique(keys):
    """Reference: torch.unique reordered by first occurrence."""
    uniq, inverse = torch.unique(keys, return_inverse=True)
    first = torch.full((uniq.numel(),), keys.numel()).scatter_reduce(0, inverse, torch.arange(keys.numel()), 'amin')
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    return uniq[order], rank[inverse], torch.bincount(inverse, minlength=uniq.numel())[order], first[order]


@pytest.mark.parametrize('key_space', [None, 50])
@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 80), pad=st.integers(0, 5), seed=st.integers(0, 999))
def test_unique_matches_torch_unique(key_space, n, pad, seed):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randint(0, 50, (n + pad,), generator=g)
    valid = torch.arange(n + pad) < n
    keys[n:] = torch.randint(0, 10 ** 6, (pad,), generator=g) if key_space is None else 3  # garbage padding
    res = static_unique(keys, valid, 60, key_space=key_space)
    uniq, inverse, counts, first = first_occurrence_unique(keys[:n])
    u = uniq.numel()
    assert int(res.num_unique) == u and int(res.num_dropped) == 0
    assert torch.equal(res.keys[:u], uniq) and bool((res.keys[u:] == 0).all())
    assert torch.equal(res.inverse[:n], inverse) and bool((res.inverse[n:] == 60).all())
    assert torch.equal(res.counts[:u], counts) and bool((res.counts[u:] == 0).all())
    assert torch.equal(res.first[:u], first) and bool((res.first[u:] == n + pad).all())


def test_unique_large_keys_duplicates_and_overflow():
    keys = torch.tensor([2 ** 50, 5, 2 ** 50, 7, 5, 9, 11, 5])
    valid = torch.ones(8, dtype=torch.bool)
    res = static_unique(keys, valid, 5)
    assert res.keys.tolist() == [2 ** 50, 5, 7, 9, 11] and res.counts.tolist() == [2, 3, 1, 1, 1]
    assert res.inverse.tolist() == [0, 1, 0, 2, 1, 3, 4, 1]
    with pytest.raises(BoundExceededError, match='bound max_unique exceeded: needed 5, allowed 3'):
        static_unique(keys, valid, 3)
    cut = static_unique(keys, valid, 3, strict=False)  # what an exported graph does
    assert cut.keys.tolist() == [2 ** 50, 5, 7] and cut.inverse.tolist() == [0, 1, 0, 2, 1, 3, 3, 1]
    assert (int(cut.num_unique), int(cut.num_dropped)) == (3, 2)
    none = static_unique(keys, torch.zeros(8, dtype=torch.bool), 2)
    assert int(none.num_unique) == 0 and none.inverse.tolist() == [2] * 8
    with pytest.raises(ValueError, match=r'keys \(valid rows\) contains 50, expected values in \[0, 50\)'):
        static_unique(torch.tensor([1, 50]), torch.ones(2, dtype=torch.bool), 4, key_space=50)


# ------------------------------------------------------------------------------------------- voxelize
def assert_same_voxels(res, dyn, n, max_voxels):
    v = dyn.voxel_coors.shape[0]
    assert int(res.num_voxels) == v and int(res.num_dropped) == 0
    assert torch.equal(res.voxel_coors[:v], dyn.voxel_coors) and bool((res.voxel_coors[v:] == 0).all())
    assert torch.equal(res.voxel_counts[:v], dyn.voxel_counts)
    p2v = torch.where(dyn.point2voxel >= 0, dyn.point2voxel, torch.full_like(dyn.point2voxel, max_voxels))
    assert torch.equal(res.point2voxel[:n], p2v) and bool((res.point2voxel[n:] == max_voxels).all())
    assert int(res.num_excluded) == int(dyn.num_out_of_range + dyn.num_non_finite)


@pytest.mark.parametrize('dense_keys', [False, True])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_voxelize_matches_dynamic_op_random(dense_keys, dtype):
    g = torch.Generator().manual_seed(1)
    pts = (torch.rand(500, 4, generator=g, dtype=dtype) - 0.5) * 5
    pts[3, 0], pts[9, 2] = float('nan'), float('inf')
    batch = torch.randint(0, 3, (500,), generator=g)
    padded = torch.cat([pts, torch.full((20, 4), 0.1, dtype=dtype)])  # padding inside the range: ignored
    pbatch = torch.cat([batch, torch.zeros(20, dtype=torch.long)])
    size, prange = [0.5, 0.5, 0.5], [-2, -2, -1, 2, 2, 1]
    res = static_voxelize(padded, torch.tensor(500), size, prange, 600, batch=pbatch, batch_size=3,
                          dense_keys=dense_keys)
    assert_same_voxels(res, voxelize(pts, size, prange, batch), 500, 600)


def test_voxelize_matches_dynamic_op_on_kitti(shared_data):
    pts = kitti_points(shared_data)
    n = pts.shape[0]
    padded = torch.cat([pts, torch.zeros(783, 4)])
    res = static_voxelize(padded, n, KITTI_SIZE, KITTI_RANGE, 8000)
    dyn = voxelize(pts, KITTI_SIZE, KITTI_RANGE)
    assert dyn.voxel_coors.shape[0] > 5000
    assert_same_voxels(res, dyn, n, 8000)
    # first point of every voxel = the hard voxelization's representative point
    first = torch.full((dyn.voxel_coors.shape[0],), n).scatter_reduce(
        0, dyn.point2voxel[dyn.point2voxel >= 0], torch.arange(n)[dyn.point2voxel >= 0], 'amin')
    assert torch.equal(res.first_point[:first.numel()], first)
    with pytest.raises(BoundExceededError, match=r'bound max_voxels\[0\] exceeded: needed \d+, allowed 1000'):
        static_voxelize(padded, n, KITTI_SIZE, KITTI_RANGE, 1000, bound_name='max_voxels[0]')
    cut = static_voxelize(padded, n, KITTI_SIZE, KITTI_RANGE, 1000, strict=False)
    assert int(cut.num_voxels) == 1000 and int(cut.num_dropped) == dyn.voxel_coors.shape[0] - 1000
    assert torch.equal(cut.voxel_coors, dyn.voxel_coors[:1000])


# ----------------------------------------------------------------------------------------------- top-k
@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(0, 50), seed=st.integers(0, 999), threshold=st.sampled_from([None, 0]))
def test_masked_topk_stable_matches_sorted_reference(n, k, seed, threshold):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(-3, 4, (2, n), generator=g).float()  # many ties
    valid = torch.rand(2, n, generator=g) < 0.7
    res = masked_topk(scores, k, valid=valid, min_score=threshold, stable=True)
    fast = masked_topk(scores, k, valid=valid, min_score=threshold)
    for row in range(2):
        ok = valid[row] & (scores[row] >= threshold if threshold is not None else True)
        cand = torch.arange(n)[ok]
        order = sorted(cand.tolist(), key=lambda i: (-scores[row, i].item(), i))[:k]
        m = len(order)
        assert int(res.num_selected[row]) == m == int(fast.num_selected[row])
        assert res.indices[row, :m].tolist() == order and bool((res.indices[row, m:] == n).all())
        assert torch.equal(res.values[row, :m], scores[row, order]) and bool((res.values[row, m:] == 0).all())
        # torch.topk breaks ties in any order, but selects the same values
        assert torch.equal(fast.values[row], res.values[row])


def test_gather_rows_reads_the_fill_row_at_the_dump_index():
    src = torch.arange(6.0).view(3, 2)
    out = gather_rows(src, torch.tensor([[2, 3], [0, 3]]), fill=-1.0)
    assert out.tolist() == [[[4, 5], [-1, -1]], [[0, 1], [-1, -1]]]
    with pytest.raises(ValueError, match=r'index contains 4, expected values in \[0, 4\)'):
        gather_rows(src, torch.tensor([4]))


# --------------------------------------------------------------------------------------------- ONNX
class StaticPipeline(torch.nn.Module):
    """Voxelize -> mean/max point features per voxel -> top-k voxels by intensity -> gather."""

    def __init__(self, max_voxels, k):
        super().__init__()
        self.max_voxels, self.k = max_voxels, k

    def forward(self, points, num_valid):
        v = static_voxelize(points, num_valid, [0.5] * 3, KITTI_RANGE, self.max_voxels)
        mean = static_segment_reduce(points, v.point2voxel, self.max_voxels, 'mean')
        peak = static_segment_reduce(points, v.point2voxel, self.max_voxels, 'max')
        live = torch.arange(self.max_voxels) < v.num_voxels
        top = masked_topk(peak[:, 3], self.k, valid=live, stable=True)
        return (v.voxel_coors, v.point2voxel, v.num_voxels, v.num_dropped, mean, peak, top.indices,
                gather_rows(mean, top.indices))


def test_onnx_round_trip(shared_data, tmp_path):
    pts = kitti_points(shared_data)
    padded = torch.cat([pts, torch.zeros(762, 4)])
    num_valid = torch.tensor(pts.shape[0])
    model = StaticPipeline(4000, 64).eval()
    path = tmp_path / 'static.onnx'
    torch.onnx.export(model, (padded, num_valid), str(path), dynamo=True, opset_version=18, external_data=False,
                      custom_translation_table=custom_translations())
    graph = onnx.load(str(path))
    onnx.checker.check_model(graph)
    ops = {(n.domain, n.op_type) for n in graph.graph.node}
    assert {d for d, _ in ops} <= {'', 'ai.onnx'}, ops
    assert not {'Unique', 'NonZero', 'Loop', 'If'} & {t for _, t in ops}, ops
    assert all(d.dim_value > 0 for o in graph.graph.output for d in o.type.tensor_type.shape.dim)  # static shapes
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    names = [i.name for i in session.get_inputs()]

    def check(points, n, strict):
        with torch.no_grad():
            if strict is None:
                expected = model(points, n)
            else:  # what the graph does on overflow: truncate and report
                v = static_voxelize(points, n, [0.5] * 3, KITTI_RANGE, 4000, strict=False)
                expected = (v.voxel_coors, v.point2voxel, v.num_voxels, v.num_dropped)
        got = session.run(None, dict(zip(names, [points.numpy(), n.numpy()])))
        for g, e in zip(got, expected):
            assert g.shape == tuple(e.shape)
            np.testing.assert_allclose(g, e.numpy(), rtol=0, atol=1e-5)
        return got

    got = check(padded, num_valid, None)
    assert int(got[2]) > 1500 and int(got[3]) == 0
    # more voxels than the bound: eager raises, the graph truncates and reports the dropped count
    dense = torch.rand(17_238 + 762, 4) * torch.tensor([70.0, 80.0, 4.0, 1.0]) + torch.tensor([0.0, -40.0, -3.0, 0.0])
    with pytest.raises(BoundExceededError):
        model(dense, num_valid)
    got = check(dense, num_valid, strict=False)
    assert int(got[2]) == 4000 and int(got[3]) > 0
