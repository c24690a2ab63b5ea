"""rulebook: neighbour maps vs the pure-torch reference, vs spconv's own indice pairs (random and the Waymo
voxelization from traveller59/spconv@263d6b4:test/data/test_spconv.pkl), properties, invalid inputs, opcheck,
CUDA."""
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _voxel_helpers import random_voxels, voxel_key, waymo_voxels

from fsdlite.ops import ConvRulebook, conv_output_shape, rulebook_conv, rulebook_inverse, rulebook_subm
from fsdlite.ops.rulebook import reference
from fsdlite.ops.rulebook.reference import (rulebook_conv_reference, rulebook_inverse_reference,
                                            rulebook_subm_reference)

SHAPE = (6, 7, 9)


def pair_codes(inp, out, k, kv, num_out):
    """Sorted codes of (input row, output row, offset) triples."""
    return torch.sort((inp * num_out + out) * kv + k).values


def nbr_codes(nbr, dump, num_out):
    """Sorted codes of the non-dump entries of a neighbour map's first ``num_out`` rows."""
    o, k = torch.nonzero(nbr[:num_out] != dump, as_tuple=True)
    return pair_codes(nbr[o, k], o, k, nbr.shape[1], num_out)


def brute_force_nbr(coors, n, out_cells, dump):
    """(Vout, K) neighbour map by comparing every queried cell with every valid voxel (O(Vout * K * n))."""
    if n == 0:
        return torch.full(out_cells.shape[:2], dump)
    match = (out_cells[:, :, None, :] == coors[None, None, :n, :]).all(-1)  # (Vout, K, n)
    return torch.where(match.any(-1), match.long().argmax(-1), torch.full(match.shape[:2], dump))


def kernel_cells(cells, kernel, scale, shift):
    """(V, K, 4) cells ``c * scale + shift_k`` for every kernel offset (itertools.product order), batch kept."""
    kidx = torch.tensor(list(itertools.product(*(range(k) for k in kernel))))
    out = cells[:, None, :].repeat(1, kidx.shape[0], 1)
    out[..., 1:] = out[..., 1:] * scale + shift(kidx)
    return out


def assert_conv_equal(res, ref):
    assert isinstance(res, ConvRulebook)
    for name, got, want in zip(ConvRulebook._fields, res, ref):
        assert got.dtype == torch.int64, name
        assert torch.equal(got, want), name


# ------------------------------------------------------------------------------------------- reference
@pytest.mark.parametrize('kernel, dilation', [(3, 1), (3, 2), (1, 1), (5, 1), ((1, 3, 5), (1, 2, 1))])
def test_subm_matches_reference(kernel, dilation):
    coors, n = random_voxels()
    k3 = [kernel] * 3 if isinstance(kernel, int) else list(kernel)
    d3 = [dilation] * 3 if isinstance(dilation, int) else list(dilation)
    nbr = rulebook_subm(coors, n, SHAPE, kernel, dilation)
    assert nbr.shape == (coors.shape[0], k3[0] * k3[1] * k3[2])
    assert torch.equal(nbr, rulebook_subm_reference(coors, n, SHAPE, k3, d3))
    assert bool((nbr[n:] == coors.shape[0]).all())


@pytest.mark.parametrize('kernel, stride, padding, dilation', [
    (3, 2, 1, 1), (2, 2, 0, 1), (3, 1, 0, 1), (3, 2, 0, 2), (3, 3, 2, 1), ((3, 1, 3), (2, 1, 1), (1, 0, 0), 1)])
def test_conv_and_inverse_match_reference(kernel, stride, padding, dilation):
    coors, n = random_voxels()
    t = [[v] * 3 if isinstance(v, int) else list(v) for v in (kernel, stride, padding, dilation)]
    res = rulebook_conv(coors, n, SHAPE, kernel, stride, padding, dilation, max_out=400)
    assert_conv_equal(res, rulebook_conv_reference(coors, n, SHAPE, *t, 400))
    assert int(res.num_dropped) == 0
    inv = rulebook_inverse(res.nbr, coors.shape[0])
    assert torch.equal(inv, rulebook_inverse_reference(res.nbr, coors.shape[0]))


def test_overflow_truncates_the_largest_keys_and_counts_them():
    coors, n = random_voxels()
    full = rulebook_conv(coors, n, SHAPE, 3, 1, 1, max_out=2000)
    total = int(full.num_valid_out)
    cut = rulebook_conv(coors, n, SHAPE, 3, 1, 1, max_out=total - 17)
    assert (int(cut.num_valid_out), int(cut.num_dropped)) == (total - 17, 17)
    assert torch.equal(cut.out_coors, full.out_coors[:total - 17])
    assert torch.equal(cut.nbr, full.nbr[:total - 17])
    assert_conv_equal(cut, rulebook_conv_reference(coors, n, SHAPE, [3] * 3, [1] * 3, [1] * 3, [1] * 3, total - 17))
    # padding rows of a larger bound: zero coordinates, dump neighbours
    assert bool((full.out_coors[total:] == 0).all()) and bool((full.nbr[total:] == coors.shape[0]).all())


def test_int32_coordinates_and_tensor_num_valid():
    coors, n = random_voxels()
    a = rulebook_subm(coors.int(), torch.tensor(n, dtype=torch.int32), SHAPE)
    assert torch.equal(a, rulebook_subm(coors, n, SHAPE))
    b = rulebook_conv(coors.int(), torch.tensor([n]), SHAPE, 3, 2, 1, max_out=300)
    assert_conv_equal(b, rulebook_conv(coors, n, SHAPE, 3, 2, 1, max_out=300))


def test_thread_count_does_not_change_the_result():
    coors, n = random_voxels((20, 40, 40), batches=2, density=0.2, seed=3)
    previous = torch.get_num_threads()
    one = (rulebook_subm(coors, n, (20, 40, 40)), rulebook_conv(coors, n, (20, 40, 40), 3, 2, 1, max_out=n))
    torch.set_num_threads(2)
    try:
        two = (rulebook_subm(coors, n, (20, 40, 40)), rulebook_conv(coors, n, (20, 40, 40), 3, 2, 1, max_out=n))
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(one[0], two[0])
    assert_conv_equal(two[1], one[1])


# --------------------------------------------------------------------------------------------- spconv
@pytest.fixture(scope='module')
def spconv_pairs():
    """``pairs(coors, shape, k, s, p, d, subm)`` -> (out_coors, sorted (in, out, k) codes) from spconv."""
    from fsdlite.utils import compat
    compat.import_spconv()
    from spconv.core import ConvAlgo
    from spconv.pytorch import ops

    def pairs(coors, shape, k, s, p, d, subm):
        batch = int(coors[:, 0].max()) + 1
        with compat.single_thread():
            out, pair, num = ops.get_indice_pairs(coors.int().contiguous(), batch, list(shape), ConvAlgo.Native,
                                                  [k] * 3, [s] * 3, [p] * 3, [d] * 3, [0] * 3, subm, False)
        ks = torch.cat([torch.full((int(c),), i) for i, c in enumerate(num)])
        ins = torch.cat([pair[0, i, :int(c)] for i, c in enumerate(num)]).long()
        outs = torch.cat([pair[1, i, :int(c)] for i, c in enumerate(num)]).long()
        if subm:  # spconv stores offsets k < K // 2 only: add the mirrored pairs and the implicit centre
            kv, rows = k ** 3, torch.arange(coors.shape[0])
            ks = torch.cat([ks, kv - 1 - ks, torch.full_like(rows, kv // 2)])
            ins, outs = torch.cat([ins, outs, rows]), torch.cat([outs, ins, rows])
        return out.long(), ins, outs, ks

    return pairs


def check_against_spconv(spconv_pairs, coors, shape, k, s, p, d):
    n = coors.shape[0]
    padded = torch.cat([coors, torch.zeros(3, 4, dtype=torch.long)])
    kv = k ** 3
    if s == 1 and p == k // 2 and d == 1 and k % 2:
        nbr = rulebook_subm(padded, n, shape, k, d)
        _, ins, outs, ks = spconv_pairs(coors, shape, k, s, p, d, True)
        assert torch.equal(nbr_codes(nbr, padded.shape[0], n), pair_codes(ins, outs, ks, kv, n))
        return
    res = rulebook_conv(padded, n, shape, k, s, p, d, max_out=n * 8)
    m = int(res.num_valid_out)
    sp_out, ins, outs, ks = spconv_pairs(coors, shape, k, s, p, d, False)
    assert m == sp_out.shape[0] and int(res.num_dropped) == 0
    # same output set; map spconv's output rows to ours through the coordinates
    ours = res.out_coors[:m]
    assert bool((voxel_key(ours)[1:] > voxel_key(ours)[:-1]).all()), 'outputs must be sorted by (b, z, y, x)'
    pos = torch.searchsorted(voxel_key(ours), voxel_key(sp_out))
    assert torch.equal(ours[pos], sp_out)
    assert torch.equal(nbr_codes(res.nbr, padded.shape[0], m), pair_codes(ins, pos[outs], ks, kv, m))
    inv = rulebook_inverse(res.nbr, padded.shape[0])
    o, kk = torch.nonzero(res.nbr[:m] != padded.shape[0], as_tuple=True)
    assert torch.equal(inv[res.nbr[o, kk], kk], o)
    assert int((inv != res.nbr.shape[0]).sum()) == o.numel()


@pytest.mark.parametrize('k, s, p, d', [(3, 1, 1, 1), (3, 2, 1, 1), (3, 2, 0, 1), (2, 2, 0, 1), (3, 1, 1, 2),
                                        (3, 1, 0, 1)])
def test_matches_spconv_indice_pairs_random(spconv_pairs, k, s, p, d):
    coors, n = random_voxels((7, 12, 10), batches=2, density=0.25, seed=k * 10 + s)
    check_against_spconv(spconv_pairs, coors[:n], (7, 12, 10), k, s, p, d)


@pytest.mark.parametrize('k, s, p', [(3, 1, 1), (3, 2, 1)])
def test_matches_spconv_on_real_waymo_crop(shared_data, spconv_pairs, k, s, p):
    coors, shape = waymo_voxels(shared_data, crop=300)
    assert coors.shape[0] > 3000
    check_against_spconv(spconv_pairs, coors, shape, k, s, p, 1)


@pytest.mark.slow
def test_matches_spconv_on_full_waymo_frame(shared_data, spconv_pairs):
    coors, shape = waymo_voxels(shared_data)
    assert coors.shape[0] == 125_562
    check_against_spconv(spconv_pairs, coors, shape, 3, 2, 1, 1)


# ---------------------------------------------------------------------------------------- properties
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 6), st.floats(0.0, 1.0), st.integers(0, 4),
       st.sampled_from([(3, 1, 1, 1), (3, 2, 1, 1), (2, 2, 0, 1), (3, 1, 0, 2), (1, 2, 0, 1)]), st.integers(0, 99))
def test_properties(nz, ny, nx, density, pad, geometry, seed):
    shape = (nz, ny, nx)
    k, s, p, d = geometry
    coors, n = random_voxels(shape, batches=2, density=density, pad=pad, seed=seed)
    vmax = coors.shape[0]
    # submanifold: centre is the row itself, the map is symmetric, padding rows are all dump
    nbr = rulebook_subm(coors, n, shape, 3, 1)
    assert torch.equal(nbr[:n, 13], torch.arange(n))
    i, kk = torch.nonzero(nbr[:n] != vmax, as_tuple=True)
    assert torch.equal(nbr[nbr[i, kk], 26 - kk], i)
    assert bool((nbr[n:] == vmax).all())
    assert torch.equal(nbr, rulebook_subm_reference(coors, n, shape, [3] * 3, [1] * 3))
    cells = kernel_cells(coors[:n], (3, 3, 3), 1, lambda kidx: kidx - 1)
    assert torch.equal(nbr[:n], brute_force_nbr(coors, n, cells, vmax))
    # strided: sorted unique outputs, each reading at least one voxel; the inverse transposes the pairs
    if min(reference.conv_output_shape(shape, [k] * 3, [s] * 3, [p] * 3, [d] * 3)) < 1:
        with pytest.raises(ValueError, match='empty output grid'):
            conv_output_shape(shape, k, s, p, d)
        return
    bound = max(n, 1) * k ** 3  # each input voxel reaches at most k^3 outputs
    res = rulebook_conv(coors, n, shape, k, s, p, d, max_out=bound)
    m = int(res.num_valid_out)
    assert int(res.num_dropped) == 0 and m <= bound
    out = res.out_coors[:m]
    key = ((out[:, 0] * 64 + out[:, 1]) * 64 + out[:, 2]) * 64 + out[:, 3]
    assert bool((key[1:] > key[:-1]).all())
    assert bool((res.nbr[:m] < vmax).any(1).all()) and bool((res.nbr[m:] == vmax).all())
    assert_conv_equal(res, rulebook_conv_reference(coors, n, shape, [k] * 3, [s] * 3, [p] * 3, [d] * 3, bound))
    cells = kernel_cells(out, (k, k, k), s, lambda kidx: kidx * d - p)
    assert torch.equal(res.nbr[:m], brute_force_nbr(coors, n, cells, vmax))
    # brute-force output set: every cell o with o * s - p + k * d on a voxel, inside the output grid
    grid = reference.conv_output_shape(shape, [k] * 3, [s] * 3, [p] * 3, [d] * 3)
    every = torch.stack(torch.meshgrid(torch.arange(2), *(torch.arange(g) for g in grid), indexing='ij'), -1)
    every = every.view(-1, 4)
    hit = (brute_force_nbr(coors, n, kernel_cells(every, (k, k, k), s, lambda kidx: kidx * d - p), vmax) < vmax)
    assert torch.equal(every[hit.any(1)], out)  # meshgrid order is the (b, z, y, x) key order
    inv = rulebook_inverse(res.nbr, vmax)
    o, kk = torch.nonzero(res.nbr != vmax, as_tuple=True)
    assert torch.equal(inv[res.nbr[o, kk], kk], o)
    assert int((inv != bound).sum()) == o.numel()


def test_empty_and_single_voxel():
    empty = torch.zeros(4, 4, dtype=torch.long)
    assert torch.equal(rulebook_subm(empty, 0, SHAPE), torch.full((4, 27), 4))
    res = rulebook_conv(empty, 0, SHAPE, 3, 2, 1, max_out=3)
    assert (int(res.num_valid_out), int(res.num_dropped)) == (0, 0) and torch.equal(res.nbr, torch.full((3, 27), 4))
    assert rulebook_subm(torch.zeros(0, 4, dtype=torch.long), 0, SHAPE).shape == (0, 27)
    assert rulebook_conv(empty, 0, SHAPE, 3, 2, 1, max_out=0).nbr.shape == (0, 27)
    # one voxel in the far grid corner: only the centre of the submanifold map; the strided conv (output grid
    # (3, 4, 5)) has one output, (2, 3, 4), reading the voxel at offset (2, 1, 1) = 22
    one = torch.tensor([[1, 5, 6, 8]])
    assert rulebook_subm(one, 1, SHAPE).tolist() == [[1] * 13 + [0] + [1] * 13]
    assert conv_output_shape(SHAPE, 3, 2, 1) == (3, 4, 5)
    res = rulebook_conv(one, 1, SHAPE, 3, 2, 1, max_out=10)
    assert int(res.num_valid_out) == 1 and res.out_coors[0].tolist() == [1, 2, 3, 4]
    assert res.nbr[0].tolist() == [1] * 22 + [0] + [1] * 4
    assert torch.equal(rulebook_inverse(res.nbr, 1), torch.tensor([[10] * 22 + [0] + [10] * 4]))
    # a voxel at the origin with padding 1 reaches the output origin
    res = rulebook_conv(torch.tensor([[0, 0, 0, 0]]), 1, SHAPE, 3, 2, 1, max_out=10)
    assert res.out_coors[0].tolist() == [0, 0, 0, 0] and res.nbr[0, 13] == 0


# ------------------------------------------------------------------------------------------ invalid input
@pytest.mark.parametrize('call, error, match', [
    (lambda c: rulebook_subm(c.float(), 3, SHAPE), TypeError, 'coors must have one of the dtypes'),
    (lambda c: rulebook_subm(c[:, :3], 3, SHAPE), ValueError, r'coors.shape\[1\] must be 4'),
    # values (num_valid, coordinates, nbr): checked once, by the C++ op
    (lambda c: rulebook_subm(c, 7, SHAPE), RuntimeError, r'num_valid must lie in \[0, coors.size\(0\)\] = \[0, 5\]'),
    (lambda c: rulebook_subm(c, -1, SHAPE), ValueError, 'num_valid must be >= 0'),
    (lambda c: rulebook_subm(c, torch.tensor([1, 2]), SHAPE), ValueError, 'num_valid must be an int or a 1-element'),
    (lambda c: rulebook_subm(c, 4, SHAPE), RuntimeError, r'coors\[:num_valid, 1\] \(z\) must lie in \[0, 6\)'),
    (lambda c: rulebook_subm(c, 3, (6, 7)), TypeError, 'spatial_shape must be an int or a sequence of 3'),
    (lambda c: rulebook_subm(c, 3, SHAPE, 2), ValueError, 'kernel_size must be odd'),
    (lambda c: rulebook_subm(c, 3, SHAPE, 3, 0), ValueError, 'dilation must be >= 1'),
    (lambda c: rulebook_conv(c, 3, SHAPE, 3, 0, max_out=4), ValueError, 'stride must be >= 1'),
    (lambda c: rulebook_conv(c, 3, SHAPE, 3, 2, -1, max_out=4), ValueError, 'padding must be >= 0'),
    (lambda c: rulebook_conv(c, 3, SHAPE, 9, 1, 0, max_out=4), ValueError, 'empty output grid'),
    (lambda c: rulebook_conv(c, 3, SHAPE, 3, max_out=-2), ValueError, 'max_out must be >= 0'),
    (lambda c: rulebook_conv(c, 3, SHAPE, 3, 2.0, max_out=4), TypeError, 'stride must be an int'),
    (lambda c: rulebook_inverse(torch.full((2, 27), 9), 5), RuntimeError,
     r'nbr \(rows of the strided conv.s input; num_rows is the dump\) contains 9, expected values in \[0, 6\)'),
    # were 'Tensor.item() cannot be called on meta tensors'
    (lambda c: rulebook_subm(c, torch.tensor(3, device='meta'), SHAPE), ValueError, 'coors on cpu, num_valid on meta'),
    (lambda c: rulebook_conv(c.to('meta'), torch.tensor(3), SHAPE, 3, max_out=4), ValueError,
     'coors on meta, num_valid on cpu'),
])
def test_invalid_arguments(call, error, match):
    coors = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 4], [1, 0, 0, 0], [0, 6, 0, 0], [0, 0, 0, 0]])
    with pytest.raises(error, match=match):
        call(coors)


def test_negative_batch_and_duplicates_raise():
    coors = torch.tensor([[0, 1, 2, 3], [-1, 1, 2, 4]])
    with pytest.raises(RuntimeError, match=r'batch ids \(coors\[:num_valid, 0\]\) must be >= 0, got -1'):
        rulebook_subm(coors, 2, SHAPE)
    dup = torch.tensor([[0, 1, 2, 3], [0, 0, 0, 0], [0, 1, 2, 3]])
    for call in (lambda: rulebook_subm(dup, 3, SHAPE), lambda: rulebook_conv(dup, 3, SHAPE, 3, 2, 1, max_out=9)):
        with pytest.raises(RuntimeError, match=r'coors rows 0 and 2 are the same voxel \[0, 1, 2, 3\]'):
            call()
    assert rulebook_subm(dup, 2, SHAPE).shape == (3, 27)  # the duplicate is padding: ignored


def test_inverse_rejects_conflicting_pairs():
    nbr = torch.tensor([[0, 2], [0, 1]])
    with pytest.raises(RuntimeError, match='nbr maps input row 0 at offset 0 to two outputs'):
        rulebook_inverse(nbr, 2)


def test_cpp_checks_guard_direct_calls():
    """The raw ops validate too (no crash on bad input that skips the Python wrapper)."""
    ops, grid = torch.ops.fsdlite, list(SHAPE)
    coors = torch.tensor([[0, 1, 2, 3], [0, 9, 9, 9]])
    with pytest.raises(RuntimeError, match=r'coors\[:num_valid, 1\] \(z\) must lie in \[0, 6\)'):
        ops.rulebook_subm(coors, torch.tensor(2), grid, [3] * 3, [1] * 3)
    with pytest.raises(RuntimeError, match='num_valid must lie in'):
        ops.rulebook_subm(coors, torch.tensor(3), grid, [3] * 3, [1] * 3)
    with pytest.raises(RuntimeError, match='must be odd'):
        ops.rulebook_subm(coors, torch.tensor(1), grid, [2] * 3, [1] * 3)
    with pytest.raises(RuntimeError, match='max_out must lie in'):
        ops.rulebook_conv(coors, torch.tensor(1), grid, [3] * 3, [2] * 3, [1] * 3, [1] * 3, -1)
    with pytest.raises(RuntimeError, match=r'nbr \(rows of the strided'):
        ops.rulebook_inverse(torch.tensor([[5]]), 2)
    with pytest.raises(RuntimeError, match='more than 2'):
        ops.rulebook_subm(torch.tensor([[2 ** 40, 0, 0, 0]]), torch.tensor(1), [2 ** 20] * 3, [1] * 3, [1] * 3)


# ---------------------------------------------------------------------------------------------- opcheck
def test_opcheck():
    coors, n = random_voxels()
    nv = torch.tensor(n)
    torch.library.opcheck(torch.ops.fsdlite.rulebook_subm.default, (coors, nv, list(SHAPE), [3] * 3, [1] * 3))
    args = (coors, nv, list(SHAPE), [3] * 3, [2] * 3, [1] * 3, [1] * 3, 300)
    torch.library.opcheck(torch.ops.fsdlite.rulebook_conv.default, args)
    nbr = torch.ops.fsdlite.rulebook_conv(*args)[3]
    torch.library.opcheck(torch.ops.fsdlite.rulebook_inverse.default, (nbr, coors.shape[0]))


# ------------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
def test_cuda_matches_cpu():
    grid = (30, 60, 60)
    coors, n = random_voxels(grid, batches=3, density=0.1, seed=5)
    nv = torch.tensor(n)
    assert torch.equal(rulebook_subm(coors.cuda(), nv.cuda(), grid).cpu(), rulebook_subm(coors, n, grid))
    for k, s, p, d, bound in [(3, 2, 1, 1, n), (2, 2, 0, 1, n), (3, 1, 1, 2, n // 3)]:
        gpu = rulebook_conv(coors.cuda(), n, grid, k, s, p, d, max_out=bound)
        cpu = rulebook_conv(coors, n, grid, k, s, p, d, max_out=bound)
        assert_conv_equal(ConvRulebook(*(t.cpu() for t in gpu)), cpu)
        assert torch.equal(rulebook_inverse(gpu.nbr, coors.shape[0]).cpu(), rulebook_inverse(cpu.nbr, coors.shape[0]))


@pytest.mark.cuda
def test_cuda_errors_and_opcheck():
    dup = torch.tensor([[0, 1, 2, 3], [0, 0, 0, 0], [0, 1, 2, 3]]).cuda()
    with pytest.raises(RuntimeError, match='coors rows 0 and 2 are the same voxel'):
        rulebook_subm(dup, 3, SHAPE)
    with pytest.raises(RuntimeError, match='to two outputs'):
        rulebook_inverse(torch.tensor([[0, 2], [0, 1]]).cuda(), 2)
    empty = torch.zeros(4, 4, dtype=torch.long).cuda()
    assert int(rulebook_conv(empty, 0, SHAPE, 3, 2, 1, max_out=3).num_valid_out) == 0
    coors, n = random_voxels()
    args = (coors.cuda(), torch.tensor(n).cuda(), list(SHAPE), [3] * 3, [2] * 3, [1] * 3, [1] * 3, 300)
    torch.library.opcheck(torch.ops.fsdlite.rulebook_conv.default, args)
