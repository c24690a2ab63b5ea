"""subm_offset_pairs / conv_offset_pairs (rulebooks straight to sparse_conv's offset-grouped pairs) vs the pure-torch
reference, vs the padded rulebook ops + pairs_by_offset on the Waymo voxelization of
traveller59/spconv@263d6b4:test/data/test_spconv.pkl, properties (sorted and unsorted rows), thread count, invalid
input, opcheck, CUDA."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _voxel_helpers import voxel_key, waymo_voxels

from fsdlite.ops import KernelMap, conv_offset_pairs, pairs_by_offset, rulebook_conv, rulebook_subm, subm_offset_pairs
from fsdlite.ops.rulebook.reference import conv_offset_pairs_reference, subm_offset_pairs_reference

SHAPE = (6, 7, 9)


def voxels(shape=SHAPE, batches=2, density=0.3, seed=0, sort=False):
    """(V, 4) unique voxels, in random row order or sorted by (b, z, y, x)."""
    g = torch.Generator().manual_seed(seed)
    coors = torch.nonzero(torch.rand(batches, *shape, generator=g) < density)
    return coors if sort else coors[torch.randperm(coors.shape[0], generator=g)]


def tensors(kmap):
    """``(pairs, offset_starts)`` of an exact KernelMap (references give the tuple)."""
    return (kmap.pairs, kmap.offset_starts) if isinstance(kmap, KernelMap) else tuple(kmap)


def assert_pairs_equal(got, want):
    (got_pairs, got_starts), (want_pairs, want_starts) = tensors(got), tensors(want)
    assert torch.equal(got_pairs, want_pairs) and torch.equal(got_starts, want_starts)


def ascending_within_offsets(values, starts):
    """True when ``values`` strictly ascend inside every offset's range."""
    s = starts.tolist()
    return all(bool((values[a + 1:b] > values[a:b - 1]).all()) for a, b in zip(s[:-1], s[1:]) if b - a > 1)


@pytest.mark.parametrize('sort', [False, True])
@pytest.mark.parametrize('kernel, dilation', [(3, 1), (3, 2), (1, 1), (5, 1), ((1, 3, 5), (1, 2, 1))])
def test_subm_matches_reference(kernel, dilation, sort):
    coors = voxels(sort=sort)
    k, d = [kernel] * 3 if isinstance(kernel, int) else kernel, [dilation] * 3 if isinstance(dilation, int) else dilation
    assert_pairs_equal(subm_offset_pairs(coors, SHAPE, kernel, dilation), subm_offset_pairs_reference(coors, SHAPE, k, d))


@pytest.mark.parametrize('sort', [False, True])
@pytest.mark.parametrize('kernel, stride, padding, dilation', [
    (3, 2, 1, 1), (3, 1, 1, 1), (2, 2, 0, 1), (3, 2, 0, 2), ((3, 1, 2), (2, 1, 2), (1, 0, 0), 1), (3, 3, 1, 1),
    (1, 2, 0, 1)])  # k1 s2: voxels at odd coordinates reach no output
def test_conv_matches_reference(kernel, stride, padding, dilation, sort):
    coors = voxels(seed=1, sort=sort)
    as3 = lambda v: [v] * 3 if isinstance(v, int) else list(v)  # noqa: E731
    out, pairs = conv_offset_pairs(coors, SHAPE, kernel, stride, padding, dilation)
    ref_out, *ref_pairs = conv_offset_pairs_reference(coors, SHAPE, *map(as3, (kernel, stride, padding, dilation)))
    assert torch.equal(out, ref_out)
    assert_pairs_equal(pairs, ref_pairs)


@pytest.mark.parametrize('crop', [64, 160])
def test_matches_padded_rulebooks_on_real_waymo_voxels(shared_data, crop):
    """Both row orders on a real voxelization: equal to rulebook_subm / rulebook_conv + pairs_by_offset; sorted rows
    give input rows ascending within each offset, so the transposed map is a swap."""
    coors, shape = waymo_voxels(shared_data, crop)
    n = coors.shape[0]
    for rows in (coors, coors[torch.argsort(voxel_key(coors))]):
        assert_pairs_equal(subm_offset_pairs(rows, shape), pairs_by_offset(rulebook_subm(rows, n, shape), n))
        rb = rulebook_conv(rows, n, shape, 3, 2, 1, max_out=8 * n)
        m = int(rb.num_valid_out)
        out, pairs = conv_offset_pairs(rows, shape, 3, 2, 1)
        assert torch.equal(out, rb.out_coors[:m])
        assert_pairs_equal(pairs, pairs_by_offset(rb.nbr[:m], n))
    sorted_rows = coors[torch.argsort(voxel_key(coors))]
    for _, pairs in ((None, subm_offset_pairs(sorted_rows, shape)), conv_offset_pairs(sorted_rows, shape, 3, 2, 1)):
        assert ascending_within_offsets(pairs.pairs[0], pairs.offset_starts)
        assert torch.equal(pairs.transposed().pairs, pairs.pairs.flip(0))


def test_thread_count_does_not_change_the_result(shared_data):
    coors, shape = waymo_voxels(shared_data, 200)  # > 4096 rows: several chunks
    assert coors.shape[0] > 3 * 4096
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append((subm_offset_pairs(coors, shape), conv_offset_pairs(coors, shape, 3, 2, 1)))
    finally:
        torch.set_num_threads(before)
    (s1, (o1, c1)), (s2, (o2, c2)) = results
    assert_pairs_equal(s1, s2)
    assert torch.equal(o1, o2)
    assert_pairs_equal(c1, c2)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 6), st.floats(0.0, 1.0), st.booleans(),
       st.sampled_from([(3, 1, 1, 1), (3, 2, 1, 1), (2, 2, 0, 1), (1, 1, 0, 1), (3, 2, 0, 2)]), st.integers(0, 99))
def test_properties(nz, ny, nx, density, sort, geometry, seed):
    """Every pair reads a real neighbour at its offset, output rows ascend within an offset (inputs too for sorted
    rows), and the pairs are exactly those of the padded rulebook."""
    shape = (nz, ny, nx)
    coors = voxels(shape, 2, density, seed, sort)
    n = coors.shape[0]
    k, s, p, d = geometry
    for kind in ('subm', 'conv'):
        if kind == 'subm':
            if k % 2 == 0:
                continue
            pairs, starts = tensors(subm_offset_pairs(coors, shape, k, d))
            out, want = coors, pairs_by_offset(rulebook_subm(coors, n, shape, k, d), n)
        else:
            if any(dim + 2 * p < d * (k - 1) + 1 for dim in shape):
                continue  # empty output grid (an error, tested below)
            out, kmap = conv_offset_pairs(coors, shape, k, s, p, d)
            pairs, starts = tensors(kmap)
            rb = rulebook_conv(coors, n, shape, k, s, p, d, max_out=max(n * k ** 3, 1))
            want = pairs_by_offset(rb.nbr[:int(rb.num_valid_out)], n)
            assert torch.equal(out, rb.out_coors[:int(rb.num_valid_out)])
        assert_pairs_equal((pairs, starts), want)
        assert ascending_within_offsets(pairs[1], starts)
        if sort:
            assert ascending_within_offsets(pairs[0], starts)
        offset = torch.repeat_interleave(torch.arange(starts.numel() - 1), starts[1:] - starts[:-1])
        kz, ky, kx = offset // (k * k), offset // k % k, offset % k
        kidx = torch.stack([kz, ky, kx], 1)
        cell_in = coors[pairs[0], 1:]
        cell_out = out[pairs[1], 1:]
        expect = cell_out + (kidx - k // 2) * d if kind == 'subm' else cell_out * s - p + kidx * d
        assert torch.equal(cell_in, expect) and torch.equal(coors[pairs[0], 0], out[pairs[1], 0])


def test_empty_and_single_voxel():
    empty = torch.zeros(0, 4, dtype=torch.long)
    kmap = subm_offset_pairs(empty, SHAPE)
    assert kmap.pairs.shape == (2, 0) and kmap.offset_starts.tolist() == [0] * 28
    assert (kmap.num_in, kmap.num_out, kmap.layout) == (0, 0, 'exact')
    out, kmap = conv_offset_pairs(empty, SHAPE, 3, 2, 1)
    assert out.shape == (0, 4) and kmap.pairs.shape == (2, 0) and kmap.offset_starts.tolist() == [0] * 28
    one = torch.tensor([[1, 5, 6, 8]])
    pairs, starts = tensors(subm_offset_pairs(one, SHAPE))
    assert pairs.tolist() == [[0], [0]] and starts.tolist() == [0] * 14 + [1] * 14
    out, kmap = conv_offset_pairs(one, SHAPE, 3, 2, 1)  # the far corner: output (2, 3, 4) at offset 22
    pairs, starts = tensors(kmap)
    assert (kmap.num_in, kmap.num_out) == (1, 1)
    assert out.tolist() == [[1, 2, 3, 4]] and pairs.tolist() == [[0], [0]] and starts.tolist() == [0] * 23 + [1] * 5


@pytest.mark.parametrize('call, error, match', [
    (lambda c: subm_offset_pairs(c.float(), SHAPE), TypeError, 'coors must have one of the dtypes'),
    (lambda c: subm_offset_pairs(c[:, :3], SHAPE), ValueError, r'coors.shape\[1\] must be 4'),
    (lambda c: subm_offset_pairs(c, (3, 7, 9)), RuntimeError, r'coors\[:num_valid, 1\] \(z\) must lie in \[0, 3\)'),
    (lambda c: subm_offset_pairs(c, SHAPE, 2), ValueError, 'kernel_size must be odd'),
    (lambda c: subm_offset_pairs(c, SHAPE, 3, 0), ValueError, 'dilation must be >= 1'),
    (lambda c: subm_offset_pairs(c, (6, 7)), TypeError, 'spatial_shape must be an int or a sequence of 3'),
    (lambda c: conv_offset_pairs(c, SHAPE, 3, 0), ValueError, 'stride must be >= 1'),
    (lambda c: conv_offset_pairs(c, SHAPE, 3, 2, -1), ValueError, 'padding must be >= 0'),
    (lambda c: conv_offset_pairs(c, SHAPE, 9), ValueError, 'empty output grid'),
    (lambda c: conv_offset_pairs(c - 1, SHAPE, 3, 2, 1), RuntimeError, r'batch ids \(coors\[:num_valid, 0\]\) must be >= 0'),
])
def test_invalid_arguments(call, error, match):
    coors = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 4], [1, 0, 0, 0], [0, 5, 0, 0]])
    with pytest.raises(error, match=match):
        call(coors)


def test_duplicate_voxels_raise():
    dup = torch.tensor([[0, 1, 2, 3], [0, 0, 0, 0], [0, 1, 2, 3]])
    for call in (lambda: subm_offset_pairs(dup, SHAPE), lambda: conv_offset_pairs(dup, SHAPE, 3, 2, 1)):
        with pytest.raises(RuntimeError, match=r'coors rows 0 and 2 are the same voxel \[0, 1, 2, 3\]'):
            call()


def test_cpp_checks_guard_direct_calls():
    ops, grid = torch.ops.fsdlite, list(SHAPE)
    coors = torch.tensor([[0, 1, 2, 3], [0, 9, 9, 9]])
    with pytest.raises(RuntimeError, match=r'coors\[:num_valid, 1\] \(z\) must lie in \[0, 6\)'):
        ops.rulebook_subm_pairs(coors, grid, [3] * 3, [1] * 3)
    with pytest.raises(RuntimeError, match='must be odd'):
        ops.rulebook_subm_pairs(coors[:1], grid, [2] * 3, [1] * 3)
    with pytest.raises(RuntimeError, match='coors must have shape'):
        ops.rulebook_conv_pairs(coors[:, :3], grid, [3] * 3, [2] * 3, [1] * 3, [1] * 3)
    with pytest.raises(RuntimeError, match='empty output grid'):
        ops.rulebook_conv_pairs(coors[:1], grid, [9] * 3, [1] * 3, [0] * 3, [1] * 3)


def test_opcheck():
    coors = voxels()
    torch.library.opcheck(torch.ops.fsdlite.rulebook_subm_pairs.default, (coors, list(SHAPE), [3] * 3, [1] * 3))
    torch.library.opcheck(torch.ops.fsdlite.rulebook_conv_pairs.default,
                          (coors, list(SHAPE), [3] * 3, [2] * 3, [1] * 3, [1] * 3))


@pytest.mark.cuda
def test_cuda_matches_cpu(shared_data):
    coors, shape = waymo_voxels(shared_data, 96)
    for rows in (coors, coors[torch.argsort(voxel_key(coors))]):
        assert_pairs_equal([t.cpu() for t in tensors(subm_offset_pairs(rows.cuda(), shape))],
                           subm_offset_pairs(rows, shape))
        out, pairs = conv_offset_pairs(rows.cuda(), shape, 3, 2, 1)
        ref_out, ref_pairs = conv_offset_pairs(rows, shape, 3, 2, 1)
        assert torch.equal(out.cpu(), ref_out)
        assert_pairs_equal([t.cpu() for t in tensors(pairs)], ref_pairs)
