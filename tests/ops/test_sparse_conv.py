"""sparse_conv: pairs of real rulebooks vs the pure-torch reference, convolution vs the reference and vs spconv
(random voxels and the Waymo voxelization from traveller59/spconv@263d6b4:test/data/test_spconv.pkl), gradients
(gradcheck in float64), the weight-gradient kernel (vs the reference, gradgradcheck), properties, thread-count
independence, invalid inputs, opcheck, CUDA."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _voxel_helpers import voxel_key, waymo_voxels

from fsdlite.models.layers.rulebook_conv import kernel_matrices
from fsdlite.ops import (KernelMap, pairs_by_offset, rulebook_conv, rulebook_subm, sparse_conv, sparse_conv_weight_grad,
                         voxel_keys)
from fsdlite.ops.sparse_conv.reference import (pairs_by_offset_reference, sparse_conv_reference,
                                               sparse_conv_weight_grad_reference)
from fsdlite.utils import compat


def random_voxels(shape=(6, 9, 8), batches=2, density=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    coors = torch.nonzero(torch.rand(batches, *shape, generator=g) < density)
    return coors[torch.randperm(coors.shape[0], generator=g)]


def pt(kmap):
    """``(pairs, offset_starts)`` of an exact KernelMap, the tensors the ops take."""
    return kmap.pairs, kmap.offset_starts


def on(kmap, device):
    """An exact KernelMap with its tensors moved to ``device``."""
    return kmap._replace(pairs=kmap.pairs.to(device), offset_starts=kmap.offset_starts.to(device))


def subm_pairs(coors, shape, kernel=3):
    """Offset pairs of a submanifold map on ``coors`` (exact rows)."""
    n = coors.shape[0]
    return pairs_by_offset(rulebook_subm(coors, n, shape, kernel), n)


def strided_pairs(coors, shape):
    """(pairs, number of outputs, output coordinates) of a k3 s2 p1 strided conv on ``coors``."""
    n = coors.shape[0]
    res = rulebook_conv(coors, n, shape, 3, 2, 1, max_out=8 * n)
    m = int(res.num_valid_out)
    return pairs_by_offset(res.nbr[:m], n), m, res.out_coors[:m]


# ----------------------------------------------------------------------------------------------- pairs
@pytest.mark.parametrize('seed', [0, 1])
def test_pairs_of_real_maps_match_reference(seed):
    shape = (6, 9, 8)
    coors = random_voxels(shape, seed=seed)
    n = coors.shape[0]
    padded = torch.cat([coors, torch.zeros(4, 4, dtype=torch.long)])
    nbr = rulebook_subm(padded, n, shape)  # padding rows and the dump index n + 4: never pairs
    got = pairs_by_offset(nbr[:n], n)
    want = pairs_by_offset_reference(nbr[:n], n)
    assert isinstance(got, KernelMap) and got.layout == 'exact' and (got.num_in, got.num_out) == (n, n)
    assert torch.equal(got.pairs, want[0]) and torch.equal(got.offset_starts, want[1])
    # every entry of the map below n is one pair, and the centre offset pairs every row with itself
    assert got.pairs.shape[1] == int((nbr[:n] < n).sum())
    centre = slice(int(got.offset_starts[13]), int(got.offset_starts[14]))
    assert torch.equal(got.pairs[0, centre], torch.arange(n)) and torch.equal(got.pairs[1, centre], torch.arange(n))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 12), st.integers(1, 9), st.integers(0, 15), st.floats(0.0, 1.0), st.integers(0, 10 ** 6))
def test_pairs_property_random_maps(vout, k, num_in, density, seed):
    g = torch.Generator().manual_seed(seed)
    nbr = torch.randint(0, num_in + 3, (vout, k), generator=g)
    nbr[torch.rand(vout, k, generator=g) > density] = num_in + 7
    got = pairs_by_offset(nbr, num_in)
    want = pairs_by_offset_reference(nbr, num_in)
    assert torch.equal(got.pairs, want[0]) and torch.equal(got.offset_starts, want[1])


# ------------------------------------------------------------------------------------- convolution
@pytest.mark.parametrize('cin, cout, dtype', [(4, 8, torch.float32), (16, 16, torch.float32),
                                              (32, 24, torch.float32), (64, 64, torch.float32),
                                              (96, 72, torch.float32), (5, 7, torch.float32),
                                              (3, 6, torch.float64)])
def test_matches_reference_on_real_rulebooks(cin, cout, dtype):
    """Both CPU paths (float32 with Cout % 8 == 0: AVX2 when available; others: portable) vs the reference, on a
    submanifold and a strided map; the float64 reference is the yardstick."""
    shape = (6, 9, 8)
    coors = random_voxels(shape, seed=cin)
    n = coors.shape[0]
    g = torch.Generator().manual_seed(cout)
    x = torch.randn(n, cin, generator=g, dtype=dtype)
    w = torch.randn(27, cin, cout, generator=g, dtype=dtype) / cin ** 0.5
    bias = torch.randn(cout, generator=g, dtype=dtype)
    sp, (st_pairs, m, _) = subm_pairs(coors, shape), strided_pairs(coors, shape)
    for pairs, num_out in [(sp, n), (st_pairs, m)]:
        got = sparse_conv(x, w, *pt(pairs), num_out, bias=bias)
        want = sparse_conv_reference(x.double(), w.double(), *pt(pairs), num_out) + bias.double()
        assert got.dtype == dtype and got.shape == (num_out, cout)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        assert torch.allclose(got.double(), want, atol=tol, rtol=tol)


def test_linearity_and_rows_without_pairs():
    shape = (5, 6, 7)
    coors = random_voxels(shape, density=0.2, seed=4)
    n = coors.shape[0]
    pairs = subm_pairs(coors, shape)
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(2, n, 8, generator=g)
    w = torch.randn(27, 8, 16, generator=g)
    lhs = sparse_conv(2 * x1 - x2, w, *pt(pairs), n)
    rhs = 2 * sparse_conv(x1, w, *pt(pairs), n) - sparse_conv(x2, w, *pt(pairs), n)
    assert torch.allclose(lhs, rhs, atol=1e-5)
    # output rows beyond the pairs' rows get the bias only
    bias = torch.randn(16, generator=g)
    out = sparse_conv(x1, w, *pt(pairs), n + 3, bias=bias)
    assert torch.equal(out[n:], bias.expand(3, 16))


def test_thread_count_does_not_change_the_result():
    shape = (20, 30, 30)
    coors = random_voxels(shape, batches=2, density=0.3, seed=2)
    n = coors.shape[0]
    pairs = subm_pairs(coors, shape)
    assert pairs.pairs.shape[1] > 20_000  # several parallel tasks per offset
    x, w = torch.randn(n, 16), torch.randn(27, 16, 32)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = sparse_conv(x, w, *pt(pairs), n)
        torch.set_num_threads(2)
        two = sparse_conv(x, w, *pt(pairs), n)
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(one, two)


# ------------------------------------------------------------------------------------------- spconv
@pytest.fixture(scope='module')
def spconv():
    return compat.import_spconv()


def run_spconv(spconv, module, feats, coors, shape):
    """spconv's (features, coordinates) of ``module`` on the voxels (one thread: see fsdlite.utils.compat)."""
    with torch.no_grad(), compat.single_thread():
        out = module(spconv.SparseConvTensor(feats, coors.int(), list(shape), int(coors[:, 0].max()) + 1))
    return out.features, out.indices.long()


@pytest.mark.parametrize('source', ['random', 'waymo'])
def test_matches_spconv_subm_and_strided(spconv, shared_data, source):
    coors, shape = (random_voxels((7, 12, 10), seed=9), (7, 12, 10)) if source == 'random' else \
        waymo_voxels(shared_data, crop=300)
    n = coors.shape[0]
    if source == 'waymo':
        assert n > 3000
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(n, 16, generator=g)
    subm = spconv.SubMConv3d(16, 32, 3, bias=True, indice_key='s')
    down = spconv.SparseConv3d(16, 24, 3, 2, 1, bias=False, indice_key='d')
    for m in (subm, down):
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    want, _ = run_spconv(spconv, subm, feats, coors, shape)
    got = sparse_conv(feats, kernel_matrices(subm.weight), *pt(subm_pairs(coors, shape)), n, bias=subm.bias)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    want, want_coors = run_spconv(spconv, down, feats, coors, shape)
    pairs, m, out_coors = strided_pairs(coors, shape)
    got = sparse_conv(feats, kernel_matrices(down.weight), *pt(pairs), m)
    assert m == want.shape[0]
    rows = torch.searchsorted(voxel_key(out_coors), voxel_key(want_coors))  # our outputs are sorted by coordinate
    assert torch.equal(out_coors[rows], want_coors)
    assert torch.allclose(got[rows], want, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------------------------------ gradients
def test_gradcheck_float64_subm_strided_and_transposed():
    shape = (4, 5, 5)
    coors = random_voxels(shape, batches=1, density=0.35, seed=3)
    n = coors.shape[0]
    g = torch.Generator().manual_seed(0)
    sp, (st_pairs, m, _) = subm_pairs(coors, shape), strided_pairs(coors, shape)
    inverse = st_pairs.transposed()
    for pairs, vin, num_out in [(sp, n, n), (st_pairs, n, m), (inverse, m, n)]:
        x = torch.randn(vin, 3, generator=g, dtype=torch.float64, requires_grad=True)
        w = torch.randn(27, 3, 2, generator=g, dtype=torch.float64, requires_grad=True)
        b = torch.randn(2, generator=g, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, w, b: sparse_conv(x, w, *pt(pairs), num_out, bias=b), (x, w, b))


# widths of the portable loop (Cout % 8) and of every AVX2 column/row blocking (Cout 8/16/32/64/72, Cin % 12 etc.)
@pytest.mark.parametrize('cin, cout', [(1, 8), (3, 5), (13, 8), (8, 16), (7, 32), (16, 64), (5, 72), (32, 24)])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_weight_grad_matches_reference_on_real_rulebooks(cin, cout, dtype):
    shape = (8, 10, 10)
    coors = random_voxels(shape, seed=cin + cout)
    n = coors.shape[0]
    (st_pairs, m, _), g = strided_pairs(coors, shape), torch.Generator().manual_seed(cin)
    for pairs, vin, vout in [(subm_pairs(coors, shape), n, n), (st_pairs, n, m), (st_pairs.transposed(), m, n)]:
        x = torch.randn(vin, cin, generator=g, dtype=dtype)
        y = torch.randn(vout, cout, generator=g, dtype=dtype)
        got = sparse_conv_weight_grad(x, y, *pt(pairs))
        want = sparse_conv_weight_grad_reference(x, y, *pt(pairs))
        assert got.shape == (27, cin, cout)
        tol = 1e-4 if dtype == torch.float32 else 1e-10
        assert torch.allclose(got, want, atol=tol, rtol=tol)


def test_weight_grad_is_the_adjoint_of_the_convolution_in_the_weight():
    """<conv(x; w), y> == <w, weight_grad(x, y)> for any w (the defining property of the weight gradient)."""
    shape = (6, 8, 8)
    coors = random_voxels(shape, seed=4)
    n = coors.shape[0]
    pairs, m, _ = strided_pairs(coors, shape)
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(n, 6, generator=g, dtype=torch.float64), torch.randn(m, 16, generator=g, dtype=torch.float64)
    w = torch.randn(27, 6, 16, generator=g, dtype=torch.float64)
    lhs = (sparse_conv(x, w, *pt(pairs), m) * y).sum()
    assert torch.allclose(lhs, (w * sparse_conv_weight_grad(x, y, *pt(pairs))).sum(), rtol=1e-12)


def test_weight_grad_thread_count_and_pair_order_within_an_offset():
    """Each offset is one task summed in pair order: same bits with 1 or 2 threads; reordering the pairs of an
    offset (allowed here) changes only the rounding."""
    shape = (10, 12, 12)
    coors = random_voxels(shape, seed=9)
    n = coors.shape[0]
    pairs, starts = pt(subm_pairs(coors, shape))
    x, y = torch.randn(n, 16), torch.randn(n, 32)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = sparse_conv_weight_grad(x, y, pairs, starts)
        torch.set_num_threads(2)
        two = sparse_conv_weight_grad(x, y, pairs, starts)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    lo, hi = int(starts[13]), int(starts[14])
    shuffled = pairs.clone()
    shuffled[:, lo:hi] = pairs[:, lo:hi].flip(1)
    assert torch.allclose(sparse_conv_weight_grad(x, y, shuffled, starts), one, atol=1e-4)


def test_gradgradcheck_float64():
    """The backward is differentiable again (its weight gradient through the kernel's own autograd)."""
    shape = (4, 5, 5)
    coors = random_voxels(shape, batches=1, density=0.35, seed=3)
    n = coors.shape[0]
    pairs, m, _ = strided_pairs(coors, shape)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(27, 3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x, w: sparse_conv(x, w, *pt(pairs), m), (x, w))
    y = torch.randn(m, 2, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: sparse_conv_weight_grad(x, y, *pt(pairs)), (x, y))


@pytest.mark.parametrize('sort', [False, True])
def test_transposed_pairs_give_the_adjoint(sort):
    """<conv(x), y> == <x, conv_T(y)> with the transposed pairs and transposed matrices (voxels in random order:
    the pairs are re-sorted; sorted by key: input rows already ascend and the pairs are only swapped)."""
    shape = (6, 8, 8)
    coors = random_voxels(shape, seed=6)
    if sort:
        coors = coors[torch.argsort(voxel_keys(coors, shape))]
    n = coors.shape[0]
    pairs, m, _ = strided_pairs(coors, shape)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(n, 8, generator=g, dtype=torch.float64), torch.randn(m, 16, generator=g, dtype=torch.float64)
    w = torch.randn(27, 8, 16, generator=g, dtype=torch.float64)
    t = pairs.transposed()
    lhs = (sparse_conv(x, w, *pt(pairs), m) * y).sum()
    rhs = (x * sparse_conv(y, w.transpose(1, 2).contiguous(), *pt(t), n)).sum()
    assert torch.allclose(lhs, rhs, rtol=1e-12)
    assert torch.equal(t.offset_starts, pairs.offset_starts)
    assert torch.equal(torch.sort(t.pairs[1]).values, torch.sort(pairs.pairs[0]).values)


def test_backward_rejects_pairs_that_are_not_a_convolution():
    """An input row twice within one offset has no transposed pairs: a clear error, not a wrong gradient."""
    x = torch.randn(3, 2, requires_grad=True)
    w = torch.randn(1, 2, 2)
    out = sparse_conv(x, w, torch.tensor([[1, 1], [0, 2]]), torch.tensor([0, 2]), 3)
    with pytest.raises(ValueError, match=r'input row 1 appears twice .* offset'):
        out.sum().backward()


# ------------------------------------------------------------------------------------------ bad input
def _ok():
    return (torch.randn(4, 3), torch.randn(2, 3, 5), torch.tensor([[0, 1, 2], [0, 1, 0]]), torch.tensor([0, 2, 3]),
            4)


@pytest.mark.parametrize('change, error, match', [
    (dict(features=torch.randn(4, 3).half()), TypeError, r'features must have one of the dtypes'),
    (dict(features=torch.randn(4)), ValueError, r'features must be 2-D'),
    (dict(weight=torch.randn(2, 4, 5)), ValueError, r'weight.shape\[1\] must be 3 \(features.shape\[1\]'),
    (dict(weight=torch.randn(2, 3, 5).double()), TypeError, r'weight must have dtype torch.float32'),
    (dict(pairs=torch.tensor([[0, 1, 2]])), ValueError, r'pairs.shape\[0\] must be 2'),
    (dict(pairs=torch.tensor([[0, 1, 2], [0, 1, 0]]).int()), TypeError, r'pairs must have dtype torch.int64'),
    (dict(offset_starts=torch.tensor([0, 3])), ValueError, r'offset_starts.shape\[0\] must be 3'),
    (dict(offset_starts=torch.tensor([0, 2, 4])), RuntimeError, r'end at pairs.size\(1\) \(3\)'),
    (dict(offset_starts=torch.tensor([0, 4, 3])), RuntimeError, r"non-decreasing"),
    (dict(pairs=torch.tensor([[0, 1, 4], [0, 1, 0]])), RuntimeError,
     r'pairs\[0\] \(input rows\) contains 4, expected values in \[0, 4\)'),
    (dict(pairs=torch.tensor([[0, 1, 2], [0, 4, 0]])), RuntimeError, r'pairs\[1\] \(output rows\) contains 4'),
    (dict(pairs=torch.tensor([[0, 1, 2], [1, 1, 0]])), RuntimeError, r'output rows of offset 0 must be strictly'),
    (dict(pairs=torch.tensor([[0, 1, 2], [1, 0, 0]])), RuntimeError, r'output rows of offset 0 must be strictly'),
    (dict(num_out=-1), ValueError, r'num_out'),
    (dict(num_out=2 ** 40), ValueError, r'sparse_conv: num_out=1099511627776 asks for an output of .* more than the'),
    (dict(bias=torch.randn(4)), ValueError, r'bias.shape\[0\] must be 5'),
])
def test_invalid_arguments(change, error, match):
    names = ('features', 'weight', 'pairs', 'offset_starts', 'num_out')
    args = dict(zip(names, _ok()))
    args.update(change)
    with pytest.raises(error, match=match):
        sparse_conv(**args)


def test_cpp_checks_guard_direct_calls():
    """The raw op validates too (no wrapper in between): out-of-range rows never reach the kernel."""
    x, w, pairs, starts, _ = _ok()
    with pytest.raises(RuntimeError, match=r'pairs\[0\] \(input rows\) contains 9, expected values in \[0, 4\)'):
        torch.ops.fsdlite.sparse_conv(x, w, torch.tensor([[0, 1, 9], [0, 1, 0]]), starts, 4)
    with pytest.raises(RuntimeError, match=r'num_out must be >= 0'):
        torch.ops.fsdlite.sparse_conv(x, w, pairs, starts, -2)
    with pytest.raises(RuntimeError, match=r'features must be float32 or float64'):
        torch.ops.fsdlite.sparse_conv(x.half(), w.half(), pairs, starts, 4)
    with pytest.raises(RuntimeError, match=r'more than int64 can count'):
        torch.ops.fsdlite.sparse_conv(x, w, pairs, starts, 2 ** 62)
    with pytest.raises(RuntimeError, match='nbr contains -1'):
        torch.ops.fsdlite.sparse_conv_pairs(torch.tensor([[0, -1]]), 2)
    with pytest.raises(ValueError, match='num_in'):
        pairs_by_offset(torch.tensor([[0, 1]]), -1)
    with pytest.raises(ValueError, match=r'pairs\[0\] contains 3, expected values in \[0, 3\)'):
        KernelMap.exact(torch.tensor([[0, 3], [0, 1]]), torch.tensor([0, 2]), 3, 2).transposed()


@pytest.mark.parametrize('call, error, match', [
    (lambda x, y, p, s: (x.half(), y.half(), p, s), RuntimeError, r'features must be float32 or float64'),
    (lambda x, y, p, s: (x, y.double(), p, s), RuntimeError, r'grad_out must have dtype Float'),
    (lambda x, y, p, s: (x, y, torch.tensor([[0, 1, 4], [0, 1, 0]]), s), RuntimeError,
     r'pairs\[0\] \(input rows\) contains [-0-9]+, expected values in \[0, 4\)'),
    (lambda x, y, p, s: (x, y, torch.tensor([[0, 1, 2], [0, 1, 6]]), s), RuntimeError,
     r'pairs\[1\] \(output rows\) contains [-0-9]+, expected values in \[0, 6\)'),
    (lambda x, y, p, s: (x, y, p, torch.tensor([0, 2, 4])), RuntimeError, r'end at pairs.size\(1\) \(3\)'),
    (lambda x, y, p, s: (x, y, p, torch.tensor([0, 3, 3]).flip(0)), RuntimeError, r'start at 0'),
    (lambda x, y, p, s: (x, y, p, torch.zeros(0, dtype=torch.long)), RuntimeError, r'K \+ 1 >= 1 entries'),
])
def test_weight_grad_cpp_checks(call, error, match):
    """The raw weight-gradient op validates before its kernel runs (bad rows, starts, dtypes)."""
    x, _, pairs, starts, _ = _ok()
    with pytest.raises(error, match=match):
        torch.ops.fsdlite.sparse_conv_weight_grad(*call(x, torch.randn(6, 5), pairs, starts))


def test_weight_grad_wrapper_names_the_bad_argument():
    x, _, pairs, starts, _ = _ok()
    with pytest.raises(ValueError, match=r'sparse_conv_weight_grad: grad_out must be 2-D'):
        sparse_conv_weight_grad(x, torch.randn(6), pairs, starts)


def test_empty_inputs():
    x, w = torch.randn(0, 3), torch.randn(27, 3, 8)
    pairs = pairs_by_offset(torch.zeros(0, 27, dtype=torch.long), 0)
    assert pairs.pairs.shape == (2, 0) and torch.equal(pairs.offset_starts, torch.zeros(28, dtype=torch.long))
    assert sparse_conv(x, w, *pt(pairs), 0).shape == (0, 8)
    assert torch.equal(sparse_conv(x, w, *pt(pairs), 2, bias=torch.ones(8)), torch.ones(2, 8))


def test_opcheck():
    shape = (5, 6, 6)
    coors = random_voxels(shape, seed=8)
    n = coors.shape[0]
    pairs = subm_pairs(coors, shape)
    x, w = torch.randn(n, 4, requires_grad=True), torch.randn(27, 4, 8, requires_grad=True)
    # the backward reads offset_starts on the host (one product per offset): not traceable by aot_dispatch, and the
    # pairs' count is data-dependent; schema, autograd registration and the fake kernels are checked
    eager_utils = ('test_schema', 'test_autograd_registration', 'test_faketensor')
    torch.library.opcheck(torch.ops.fsdlite.sparse_conv.default, (x, w, *pt(pairs), n), test_utils=eager_utils)
    nbr = rulebook_subm(coors, n, shape)
    torch.library.opcheck(torch.ops.fsdlite.sparse_conv_pairs.default, (nbr, n), test_utils=eager_utils)
    y = torch.randn(n, 8, requires_grad=True)
    torch.library.opcheck(torch.ops.fsdlite.sparse_conv_weight_grad.default, (x, y, *pt(pairs)), test_utils=eager_utils)


# ------------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
def test_cuda_matches_cpu_forward_and_backward():
    shape = (10, 20, 20)
    coors = random_voxels(shape, seed=11)
    n = coors.shape[0]
    pairs = subm_pairs(coors, shape)
    gpu_pairs = pairs_by_offset(rulebook_subm(coors.cuda(), n, shape), n)
    assert torch.equal(gpu_pairs.pairs.cpu(), pairs.pairs)
    assert torch.equal(gpu_pairs.offset_starts.cpu(), pairs.offset_starts)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(n, 16, dtype=dtype, requires_grad=True)
        w = torch.randn(27, 16, 24, dtype=dtype, requires_grad=True)
        xg, wg = x.detach().cuda().requires_grad_(), w.detach().cuda().requires_grad_()
        cpu, gpu = sparse_conv(x, w, *pt(pairs), n), sparse_conv(xg, wg, *pt(gpu_pairs), n)
        assert torch.allclose(gpu.cpu(), cpu, atol=1e-4)
        cpu.square().sum().backward()
        gpu.square().sum().backward()
        assert torch.allclose(xg.grad.cpu(), x.grad, atol=1e-3) and torch.allclose(wg.grad.cpu(), w.grad, atol=1e-2)
        y = torch.randn(n, 24, dtype=dtype)
        want = sparse_conv_weight_grad_reference(x.detach(), y, *pt(pairs))
        got = sparse_conv_weight_grad(x.detach().cuda(), y.cuda(), *pt(gpu_pairs))
        assert torch.allclose(got.cpu(), want, atol=1e-3)


@pytest.mark.cuda
def test_cuda_errors_and_opcheck():
    x, w, pairs, starts, _ = (t.cuda() if isinstance(t, torch.Tensor) else t for t in _ok())
    with pytest.raises(RuntimeError, match=r'output rows of offset 0 must be strictly'):
        torch.ops.fsdlite.sparse_conv(x, w, torch.tensor([[0, 1, 2], [1, 1, 0]]).cuda(), starts, 4)
    torch.library.opcheck(torch.ops.fsdlite.sparse_conv.default, (x, w, pairs, starts, 4),
                          test_utils=('test_schema', 'test_autograd_registration', 'test_faketensor'))


def _cuda_cases(seed=3):
    """(pairs on CUDA, input rows, output rows) of a submanifold, a strided and the inverse (transposed) conv."""
    shape = (4, 5, 5)
    coors = random_voxels(shape, batches=1, density=0.35, seed=seed)
    n = coors.shape[0]
    sp, (st_pairs, m, _) = subm_pairs(coors, shape), strided_pairs(coors, shape)
    inverse = st_pairs.transposed()
    return [(on(pairs, 'cuda'), vin, vout)
            for pairs, vin, vout in [(sp, n, n), (st_pairs, n, m), (inverse, m, n)]]


@pytest.mark.cuda
def test_cuda_gradcheck_float64_against_the_reference():
    """On CUDA: forward and weight-gradient kernels equal the pure-torch reference; the features, weight and bias
    gradients pass gradcheck (float64) and the backward is differentiable again (gradgradcheck)."""
    g = torch.Generator().manual_seed(2)
    for pairs, vin, vout in _cuda_cases():
        x = torch.randn(vin, 3, generator=g, dtype=torch.float64).cuda().requires_grad_()
        w = torch.randn(27, 3, 2, generator=g, dtype=torch.float64).cuda().requires_grad_()
        b = torch.randn(2, generator=g, dtype=torch.float64).cuda().requires_grad_()
        want = sparse_conv_reference(x.detach().cpu(), w.detach().cpu(), pairs.pairs.cpu(),
                                     pairs.offset_starts.cpu(), vout)
        torch.testing.assert_close(sparse_conv(x, w, *pt(pairs), vout).cpu(), want, rtol=1e-12, atol=1e-12)
        y = torch.randn(vout, 2, generator=g, dtype=torch.float64).cuda()
        torch.testing.assert_close(
            sparse_conv_weight_grad(x.detach(), y, *pt(pairs)).cpu(),
            sparse_conv_weight_grad_reference(x.detach().cpu(), y.cpu(), pairs.pairs.cpu(), pairs.offset_starts.cpu()),
            rtol=1e-12, atol=1e-12)
        assert torch.autograd.gradcheck(lambda x, w, b: sparse_conv(x, w, *pt(pairs), vout, bias=b), (x, w, b))
        assert torch.autograd.gradgradcheck(lambda x, w: sparse_conv(x, w, *pt(pairs), vout), (x, w))


@pytest.mark.cuda
def test_cuda_kernels_are_deterministic_on_large_offsets():
    """Offsets summed in order and the weight gradient's chunks in chunk order: the same bits on every run, with
    offsets of many chunks (thousands of pairs)."""
    shape = (24, 40, 40)
    coors = random_voxels(shape, batches=2, density=0.3, seed=12).cuda()
    n = coors.shape[0]
    pairs = pairs_by_offset(rulebook_subm(coors, n, shape), n)
    assert int((pairs.offset_starts[1:] - pairs.offset_starts[:-1]).max()) > 4 * 256
    x, w, y = torch.randn(n, 32).cuda(), torch.randn(27, 32, 16).cuda(), torch.randn(n, 16).cuda()
    outs = [sparse_conv(x, w, *pt(pairs), n) for _ in range(3)]
    grads = [sparse_conv_weight_grad(x, y, *pt(pairs)) for _ in range(3)]
    assert all(torch.equal(o, outs[0]) for o in outs) and all(torch.equal(gw, grads[0]) for gw in grads)
    cpu_pairs = on(pairs, 'cpu')
    torch.testing.assert_close(outs[0].cpu(), sparse_conv(x.cpu(), w.cpu(), *pt(cpu_pairs), n), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(grads[0].cpu(), sparse_conv_weight_grad(x.cpu(), y.cpu(), *pt(cpu_pairs)),
                               rtol=1e-4, atol=1e-3)
