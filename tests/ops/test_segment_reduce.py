"""segment_reduce: torch_scatter semantics table, dtypes, properties vs reference and torch.scatter_reduce,
gradcheck, opcheck, invalid inputs, CUDA. The product ('mul') and the small integer / bool dtypes have their own
section (products overflow where sums do not, so they get bounded values)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.ops import segment_max, segment_min, segment_reduce
from fsdlite.ops.segment_reduce.reference import segment_reduce_reference

NAN, INF = float('nan'), float('inf')
REDUCES = ['sum', 'mean', 'max', 'min']
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64]


def run(src, index, num_segments, reduce):
    """(out, arg) of the op; arg is None for sum/mean."""
    if reduce == 'max':
        return segment_max(src, index, num_segments)
    if reduce == 'min':
        return segment_min(src, index, num_segments)
    return segment_reduce(src, index, num_segments, reduce), None


def assert_matches_reference(src, index, num_segments, reduce, atol=0.0, rtol=0.0):
    out, arg = run(src, index, num_segments, reduce)
    ref, ref_arg = segment_reduce_reference(src, index, num_segments, reduce)
    assert out.dtype == src.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref, atol=atol, rtol=rtol, equal_nan=True)
    if ref_arg is not None:
        assert torch.equal(arg, ref_arg)


# ----------------------------------------------------------------------------------- semantics table
SRC = [1, 3, 2, 4, 5, 6]
IDX = [0, 1, 0, 1, 1, 3]
TABLE = [
    # (src, index, num_segments, reduce, expected out, expected arg or None)
    (SRC, IDX, None, 'sum', [3, 12, 0, 6], None),
    (SRC, IDX, None, 'mean', [1.5, 4, 0, 6], None),
    (SRC, IDX, None, 'max', [2, 5, 0, 6], [2, 4, 6, 5]),
    (SRC, IDX, None, 'min', [1, 3, 0, 6], [0, 1, 6, 5]),
    (SRC, IDX, 6, 'max', [2, 5, 0, 6, 0, 0], [2, 4, 6, 5, 6, 6]),       # trailing empty segments
    ([1, 1, 2, 2, 2], [0, 0, 1, 1, 1], None, 'max', [1, 2], [0, 2]),    # ties -> first row
    ([1, 1, 2, 2, 2], [0, 0, 1, 1, 1], None, 'min', [1, 2], [0, 2]),
    ([NAN, 1.0], [0, 0], None, 'max', [1.0], [1]),                      # NaN never wins
    ([1.0, NAN], [0, 0], None, 'min', [1.0], [0]),
    ([NAN, NAN], [1, 1], None, 'max', [0.0, 0.0], [2, 2]),              # all-NaN segment: like empty
    ([-INF, -INF], [0, 0], None, 'max', [-INF], [0]),                   # -inf is a value
    ([INF, 2.0], [0, 0], None, 'min', [2.0], [1]),
    ([NAN, 2.0], [0, 0], None, 'sum', [NAN], None),                     # sum/mean propagate NaN
    (SRC, IDX, None, 'mul', [2, 60, 1, 6], None),                        # empty product: 1
    ([2.0, 0.0, 3.0], [0, 0, 1], 3, 'mul', [0, 3, 1], None),
    ([NAN, 2.0], [0, 0], None, 'mul', [NAN], None),
    ([], [], 3, 'mean', [0.0, 0.0, 0.0], None),                         # no rows at all
    ([], [], 2, 'min', [0.0, 0.0], [0, 0]),                             # arg = N = 0
    ([], [], None, 'sum', [], None),
]


@pytest.mark.parametrize('src, index, num_segments, reduce, expected, expected_arg', TABLE)
def test_semantics_table(src, index, num_segments, reduce, expected, expected_arg):
    src_t = torch.tensor(src, dtype=torch.float32)
    out, arg = run(src_t, torch.tensor(index, dtype=torch.long), num_segments, reduce)
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float32), equal_nan=True)
    if expected_arg is not None:
        assert arg.tolist() == expected_arg


@pytest.mark.parametrize('src, index, expected', [
    (SRC, IDX, [1, 4, 0, 6]),            # floor of [1.5, 4, -, 6]
    ([-3, 0, 7], [0, 0, 1], [-2, 7]),    # floor(-1.5) = -2, not truncation
    ([-4, -4], [0, 0], [-4]),
])
@pytest.mark.parametrize('dtype', [torch.int32, torch.int64])
def test_integer_mean_is_floor_division(src, index, expected, dtype):
    out = segment_reduce(torch.tensor(src, dtype=dtype), torch.tensor(index), reduce='mean')
    assert out.dtype == dtype and out.tolist() == expected


@pytest.mark.parametrize('reduce', REDUCES)
def test_int32_index_and_multi_dim_features(reduce):
    g = torch.Generator().manual_seed(0)
    src = torch.randn(40, 3, 2, generator=g)
    index = torch.randint(0, 9, (40,), generator=g)
    expected = run(src, index, 10, reduce)
    got = run(src, index.int(), 10, reduce)
    torch.testing.assert_close(got[0], expected[0])
    assert got[0].shape == (10, 3, 2)
    assert_matches_reference(src, index, 10, reduce, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize('reduce', REDUCES)
def test_non_contiguous_src(reduce):
    g = torch.Generator().manual_seed(1)
    src = torch.randn(4, 30, generator=g).t()  # (30, 4), non-contiguous
    index = torch.randint(0, 5, (30,), generator=g)
    assert_matches_reference(src, index, 5, reduce, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('reduce', REDUCES)
def test_dtypes_match_reference(dtype, reduce):
    g = torch.Generator().manual_seed(2)
    values = torch.randint(-20, 20, (200, 3), generator=g)  # small integers: exact in every dtype, many ties
    index = torch.randint(0, 30, (200,), generator=g)
    src = values.to(dtype)
    out, arg = run(src, index, 32, reduce)
    ref, ref_arg = segment_reduce_reference(values.double(), index, 32, reduce)
    if reduce == 'mean' and not dtype.is_floating_point:
        ref, _ = segment_reduce_reference(values.long(), index, 32, reduce)
    tol = dict(atol=0.05, rtol=0.01) if dtype in (torch.float16, torch.bfloat16) else dict(atol=1e-5, rtol=1e-6)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), ref.double(), **tol)
    if ref_arg is not None:
        assert torch.equal(arg, ref_arg)


# ---------------------------------------------------------------------------------------- properties
@st.composite
def segment_problems(draw, dtypes=(torch.float32, torch.float64, torch.int64)):
    n = draw(st.integers(0, 40))
    num_segments = draw(st.integers(0, 8)) + (1 if n else 0)
    width = draw(st.sampled_from([(), (1,), (3,), (2, 2)]))
    seed = draw(st.integers(0, 2**31 - 1))
    dtype = draw(st.sampled_from(dtypes))
    g = torch.Generator().manual_seed(seed)
    # few distinct values -> many duplicates and ties
    src = torch.randint(-4, 5, (n, *width), generator=g).to(dtype)
    if dtype.is_floating_point and draw(st.booleans()):
        src = src / 3  # non-integers too
    index = torch.randint(0, max(num_segments, 1), (n,), generator=g)
    return src, index, num_segments


@settings(max_examples=60, deadline=None)
@given(segment_problems(), st.sampled_from(REDUCES))
def test_property_matches_reference(problem, reduce):
    src, index, num_segments = problem
    assert_matches_reference(src, index, num_segments, reduce, atol=1e-5, rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(segment_problems(), st.sampled_from(REDUCES))
def test_property_matches_torch_scatter_reduce(problem, reduce):
    src, index, num_segments = problem
    mode = {'sum': 'sum', 'mean': 'mean', 'max': 'amax', 'min': 'amin'}[reduce]
    idx = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    expected = torch.zeros((num_segments, *src.shape[1:]), dtype=src.dtype).scatter_reduce(
        0, idx, src, mode, include_self=False)
    out, arg = run(src, index, num_segments, reduce)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-6)
    if arg is not None:  # the arg row holds the value and is the first such row of its segment
        n = src.shape[0]
        filled = arg < n
        rows = arg.clamp(max=max(n - 1, 0))
        if n:
            assert torch.equal(src.gather(0, rows)[filled], out[filled])
            seg = torch.arange(num_segments).view(-1, *([1] * (src.dim() - 1))).expand_as(out)
            assert torch.equal(index[rows][filled], seg[filled])
            earlier = (torch.arange(n).view(-1, *([1] * (src.dim() - 1))) < arg.gather(0, idx)) & (
                src == out.gather(0, idx))
            assert not bool(earlier.any())


@settings(max_examples=40, deadline=None)
@given(segment_problems(dtypes=(torch.float64,)), st.sampled_from(REDUCES), st.integers(0, 2**31 - 1))
def test_property_permutation_invariance(problem, reduce, seed):
    """Values do not depend on row order."""
    src, index, num_segments = problem
    perm = torch.randperm(src.shape[0], generator=torch.Generator().manual_seed(seed))
    a, _ = run(src, index, num_segments, reduce)
    b, _ = run(src[perm], index[perm], num_segments, reduce)
    torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)


# ------------------------------------------------------------------------------------------ gradients
def grad_problem(seed=0, shape=(12, 3)):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(*shape, generator=g, dtype=torch.float64)  # distinct values: max/min differentiable
    index = torch.tensor([0, 2, 2, 0, 5, 2, 0, 5, 5, 2, 0, 2])[:shape[0]]  # segments 1, 3, 4 empty
    return src.requires_grad_(), index


@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('shape', [(12,), (12, 3), (12, 2, 2)])
def test_gradcheck(reduce, shape):
    src, index = grad_problem(shape=shape)
    assert torch.autograd.gradcheck(lambda s: run(s, index, 7, reduce)[0], (src,))


@pytest.mark.parametrize('reduce', REDUCES)
def test_gradgradcheck(reduce):
    src, index = grad_problem()
    assert torch.autograd.gradgradcheck(lambda s: run(s, index, 7, reduce)[0], (src,))


def test_max_gradient_goes_to_the_first_tied_row():
    src = torch.tensor([1.0, 3.0, 3.0, 2.0], requires_grad=True)
    out, _ = segment_max(src, torch.tensor([0, 0, 0, 1]), 3)
    out.sum().backward()
    assert src.grad.tolist() == [0.0, 1.0, 0.0, 1.0]


# -------------------------------------------------------------------------------------------- opcheck
@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.int64])
def test_opcheck(reduce, dtype):
    src, index = grad_problem()
    src = src.detach().to(dtype).requires_grad_(dtype.is_floating_point)
    torch.library.opcheck(torch.ops.fsdlite.segment_reduce.default, (src, index, 7, reduce))


# ------------------------------------------------------------------------------------- invalid inputs
S = torch.arange(6.0)
I = torch.tensor([0, 1, 0, 1, 1, 3])


@pytest.mark.parametrize('args, error, match', [
    ((S.to(torch.complex64), I), TypeError, 'src must have one of the dtypes'),
    ((S.bool(), I, None, 'mean'), TypeError, "reduce='mean' needs a numeric src"),
    ((torch.tensor(1.0), I), ValueError, 'src must have at least 1 dimensions'),
    ([[1.0, 2.0], I[:2]], TypeError, 'src must be a torch.Tensor'),
    ((S, I.float()), TypeError, 'index must have one of the dtypes'),
    ((S, I.view(2, 3)), ValueError, 'index must be 1-D'),
    ((S, I[:5]), ValueError, r'index.shape\[0\] must be 6'),
    ((S, torch.tensor([0, 1, -1, 1, 1, 3])), RuntimeError, 'index contains -1'),  # checked once, by the C++ op
    ((S, I, 3), RuntimeError, r'index contains 3, expected values in \[0, 3\)'),
    ((S, I, -1), ValueError, 'num_segments must be >= 0'),
    ((S, I, 4.0), TypeError, 'num_segments must be an int'),
    ((S, I, None, 'prod'), ValueError, "reduce must be one of"),
    # were 'Storage size calculation overflowed' / a schema type error, naming neither the op nor the argument
    ((S[:, None].repeat(1, 3), I, 2 ** 62), ValueError, r'num_segments=4611686018427387904 gives an output of .* x 3 '),
    # was the allocator's "DefaultCPUAllocator: can't allocate memory" naming no argument
    ((S[:, None].repeat(1, 16), I, 2 ** 33), ValueError, r'num_segments=8589934592 asks for an output of 8589934592 x '
     r'16 \(elements per row of src\) elements = 512.0 GiB, more than the .* of memory on cpu'),
    ((S, torch.tensor([0, 1, 2, 1, 1, 2 ** 63 - 1])), ValueError,
     r'num_segments \(index.max\(\) \+ 1\)=9223372036854775808 gives an output'),
])
def test_invalid_inputs_raise(args, error, match):
    with pytest.raises(error, match=match):
        segment_reduce(*args)


@pytest.mark.parametrize('fn', [segment_max, segment_min])
def test_invalid_inputs_raise_for_arg_variants(fn):
    with pytest.raises(RuntimeError, match='index contains -2'):
        fn(S, torch.tensor([0, 1, -2, 1, 1, 3]))
    with pytest.raises(RuntimeError, match='index contains 9'):
        fn(S, torch.tensor([0, 1, 9, 1, 1, 3]), 4)


@pytest.mark.parametrize('args, match', [
    ((S, torch.tensor([0, 1, -1, 1, 1, 3]), 4, 'sum'), r'index contains [-0-9]+, expected values in \[0, 4\)'),
    ((S, I, 2, 'max'), r'index contains [-0-9]+, expected values in \[0, 2\)'),
    ((S, I[:4], 4, 'sum'), 'must equal src.size'),
    ((S, I.int(), 4, 'sum'), 'index must have dtype Long'),
    ((S, I, 4, 'median'), 'reduce must be one of'),
    ((S, I, -2, 'sum'), 'num_segments must be >= 0'),
    ((S.to(torch.complex64), I, 4, 'sum'), 'src must have dtype'),
    ((S.bool(), I, 4, 'mean'), "reduce='mean' needs a numeric src"),
    ((torch.tensor(1.0), I, 4, 'sum'), 'src must have at least 1 dimension'),
    ((S[:, None].repeat(1, 3), I, 2 ** 62, 'max'), r'num_segments=4611686018427387904 gives an output of .* x 3 '),
    ((S[:0, None, None].repeat(1, 2, 2), I[:0], 2 ** 63 - 1, 'sum'), r'num_segments=9223372036854775807 gives an'),
])
def test_kernel_validates_before_running(args, match):
    """The C++ op raises (never crashes) when called directly with bad arguments."""
    with pytest.raises(RuntimeError, match=match):
        torch.ops.fsdlite.segment_reduce(*args)


# ----------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize('dtype', DTYPES)
@pytest.mark.parametrize('reduce', REDUCES)
def test_cuda_matches_cpu(dtype, reduce):
    g = torch.Generator().manual_seed(3)
    src = torch.randint(-20, 20, (5000, 4), generator=g).to(dtype)
    index = torch.randint(0, 700, (5000,), generator=g)
    cpu = run(src, index, 800, reduce)
    gpu = run(src.cuda(), index.cuda(), 800, reduce)
    tol = dict(atol=0.05, rtol=0.01) if dtype in (torch.float16, torch.bfloat16) else dict(atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(gpu[0].cpu(), cpu[0], **tol)
    if cpu[1] is not None:
        assert torch.equal(gpu[1].cpu(), cpu[1])  # ties -> first row on the GPU too


@pytest.mark.cuda
@pytest.mark.parametrize('src, index, reduce', [(row[0], row[1], row[3]) for row in TABLE if row[2] is None])
def test_cuda_semantics_table(src, index, reduce):
    src_t, index_t = torch.tensor(src, dtype=torch.float32), torch.tensor(index, dtype=torch.long)
    cpu = run(src_t, index_t, None, reduce)
    gpu = run(src_t.cuda(), index_t.cuda(), None, reduce)
    torch.testing.assert_close(gpu[0].cpu(), cpu[0], equal_nan=True)
    if cpu[1] is not None:
        assert torch.equal(gpu[1].cpu(), cpu[1])


@pytest.mark.cuda
@pytest.mark.parametrize('reduce', REDUCES)
def test_cuda_gradcheck_and_opcheck(reduce):
    src, index = grad_problem()
    src = src.detach().cuda().requires_grad_()
    assert torch.autograd.gradcheck(lambda s: run(s, index.cuda(), 7, reduce)[0], (src,))
    torch.library.opcheck(torch.ops.fsdlite.segment_reduce.default, (src, index.cuda(), 7, reduce))


@pytest.mark.cuda
def test_cuda_device_mismatch_raises():
    with pytest.raises(ValueError, match='one device'):
        segment_reduce(S.cuda(), I)


@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16, torch.int64])
def test_thread_count_does_not_change_the_result(reduce, dtype):
    """Above the serial threshold threads own segment ranges; the result must be identical."""
    g = torch.Generator().manual_seed(5)
    src = torch.randint(-50, 50, (20_000, 8), generator=g).to(dtype)
    index = torch.randint(0, 3_000, (20_000,), generator=g)
    one = run(src, index, 3_001, reduce)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = run(src, index, 3_001, reduce)
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(one[0], two[0])
    if one[1] is not None:
        assert torch.equal(one[1], two[1])
    assert_matches_reference(src, index, 3_001, reduce, atol=0.5 if dtype == torch.bfloat16 else 1e-5, rtol=0.01)


def test_argument_errors_are_also_runtime_errors():
    """torch and torch_scatter raise RuntimeError for bad arguments: code catching it keeps working."""
    for args in ((S, torch.tensor([0, 1, -1, 1, 1, 3])), (S.to(torch.complex64), I)):
        with pytest.raises(RuntimeError):
            segment_reduce(*args)


# ------------------------------------------------------------------------- products and small dtypes
SMALL_DTYPES = [torch.int16, torch.int8, torch.uint8, torch.bool]
ALL_REDUCES = REDUCES + ['mul']


@pytest.mark.parametrize('dtype', SMALL_DTYPES)
@pytest.mark.parametrize('reduce', ALL_REDUCES)
def test_small_dtypes_match_reference(dtype, reduce):
    if dtype == torch.bool and reduce == 'mean':
        pytest.skip('no bool mean (tested as an error)')
    g = torch.Generator().manual_seed(7)
    src = torch.randint(0, 4, (300, 3), generator=g).to(dtype)
    index = torch.randint(0, 40, (300,), generator=g)
    out, arg = run(src, index, 41, reduce)
    assert out.dtype == dtype
    assert_matches_reference(src, index, 41, reduce)


@pytest.mark.parametrize('src, reduce, expected', [
    ([100, 100], 'sum', [-56]),      # wraps in int8, as torch.scatter_add_
    ([100, 100], 'mean', [100]),     # exact: the sum accumulates in int64 (torch_scatter would give -28)
    ([16, 16], 'mul', [0]),          # 256 wraps to 0
    ([-128, -128], 'max', [-128]),   # the dtype's lowest value is a value (arg 0), not an empty segment
])
def test_int8_wraps_sums_and_products_but_not_means(src, reduce, expected):
    out, arg = run(torch.tensor(src, dtype=torch.int8), torch.tensor([0, 0]), 1, reduce)
    assert out.tolist() == expected
    if arg is not None:
        assert arg.tolist() == [0]


def test_bool_sum_is_any_and_product_is_all():
    src, index = torch.tensor([True, False, False, False, True, True]), torch.tensor([0, 0, 1, 1, 2, 2])
    assert segment_reduce(src, index, 4, 'sum').tolist() == [True, False, True, False]
    assert segment_reduce(src, index, 4, 'mul').tolist() == [False, False, True, True]


@settings(max_examples=60, deadline=None)
@given(segment_problems(dtypes=(torch.float64, torch.int64, torch.int32)))
def test_property_mul_matches_reference(problem):
    src, index, num_segments = problem
    src = src.clamp(-2, 2)  # bounded products: exact in every dtype
    assert_matches_reference(src, index, num_segments, 'mul', atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize('zeros', [(), (4,), (0, 3), (4, 6, 9)])
def test_mul_gradcheck_with_zeros(zeros):
    """The product's gradient is exact with zeros: one zero in a segment gets the product of the rest, every other
    row of a segment holding a zero gets 0."""
    src, index = grad_problem(shape=(12,))
    src = src.detach().clone()
    src[list(zeros)] = 0.0
    src.requires_grad_()
    assert torch.autograd.gradcheck(lambda s: segment_reduce(s, index, 7, 'mul'), (src,))


def test_mul_gradgradcheck_and_opcheck():
    src, index = grad_problem()
    assert torch.autograd.gradgradcheck(lambda s: segment_reduce(s, index, 7, 'mul'), (src,))
    for dtype in (torch.float32, torch.int64, torch.int8):
        value = src.detach().to(dtype).requires_grad_(dtype.is_floating_point)
        torch.library.opcheck(torch.ops.fsdlite.segment_reduce.default, (value, index, 7, 'mul'))


@pytest.mark.parametrize('dtype', [torch.float32, torch.int64])
def test_mul_thread_count_does_not_change_the_result(dtype):
    g = torch.Generator().manual_seed(8)
    src = torch.randint(-2, 3, (20_000, 8), generator=g).to(dtype)
    index = torch.randint(0, 3_000, (20_000,), generator=g)
    one = segment_reduce(src, index, 3_001, 'mul')
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = segment_reduce(src, index, 3_001, 'mul')
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(one, two)
    assert_matches_reference(src, index, 3_001, 'mul')


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.int64, torch.int32, torch.float16] +
                         SMALL_DTYPES)
@pytest.mark.parametrize('reduce', ALL_REDUCES)
def test_cuda_products_and_small_dtypes_match_cpu(dtype, reduce):
    if dtype == torch.bool and reduce == 'mean':
        pytest.skip('no bool mean')
    g = torch.Generator().manual_seed(9)
    src = torch.randint(-2, 3, (5000, 4), generator=g).to(dtype)
    index = torch.randint(0, 700, (5000,), generator=g)
    cpu = run(src, index, 800, reduce)
    gpu = run(src.cuda(), index.cuda(), 800, reduce)
    assert gpu[0].dtype == dtype
    torch.testing.assert_close(gpu[0].cpu(), cpu[0], atol=1e-3, rtol=1e-3)
    if cpu[1] is not None:
        assert torch.equal(gpu[1].cpu(), cpu[1])
