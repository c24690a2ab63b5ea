"""torch_scatter-compatible API: documented edge cases (hand-computed table), properties against the
pure-torch reference, gradients, invalid inputs, CUDA."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.ops import (scatter, scatter_add, scatter_max, scatter_mean, scatter_min, scatter_mul, scatter_sum,
                         segment_add_csr,
                         segment_coo, segment_csr, segment_max_coo, segment_max_csr, segment_mean_coo,
                         segment_mean_csr, segment_min_coo, segment_min_csr, segment_sum_coo)
from fsdlite.ops.scatter.reference import scatter_reference, segment_csr_reference

NAN, INF = float('nan'), float('inf')
T = torch.tensor


def call(reduce, src, index, dim=-1, out=None, dim_size=None):
    """(values, arg or None) through the named scatter_* function."""
    fn = {'sum': scatter_sum, 'add': scatter_add, 'mean': scatter_mean, 'max': scatter_max, 'min': scatter_min,
          'mul': scatter_mul}
    result = fn[reduce](src, index, dim, out, dim_size)
    return result if reduce in ('max', 'min') else (result, None)


# ------------------------------------------------------------------------------- documented edge cases
SRC = [1.0, 3, 2, 4, 5, 6]
IDX = [0, 1, 0, 1, 1, 3]
X = [[1.0, 2], [5, 6], [3, 4], [7, 8]]  # (4, 2)
README_SRC = [[2, 0, 1, 4, 3], [0, 2, 1, 3, 4]]
README_IDX = [[4, 5, 4, 2, 3], [0, 0, 2, 2, 1]]
CASES = [
    # name, reduce, src, index, kwargs, expected values, expected arg (or None)
    ('reference sum', 'sum', SRC, IDX, {}, [3, 12, 0, 6], None),
    ('reference add', 'add', SRC, IDX, {}, [3, 12, 0, 6], None),
    ('reference mean', 'mean', SRC, IDX, {}, [1.5, 4, 0, 6], None),
    ('reference max', 'max', SRC, IDX, {}, [2, 5, 0, 6], [2, 4, 6, 5]),
    ('reference min', 'min', SRC, IDX, {}, [1, 3, 0, 6], [0, 1, 6, 5]),
    ('reference mul', 'mul', SRC, IDX, {}, [2, 60, 1, 6], None),
    ('integer mul', 'mul', [1, 3, 2, 4, 5, 6], IDX, {}, [2, 60, 1, 6], None),
    ('mul along dim 0', 'mul', X, [0, 1, 0, 2], dict(dim=0), [[3, 8], [5, 6], [7, 8]], None),
    ('-inf is a value (max)', 'max', [-INF, -INF, 1.0], [0, 0, 1], {}, [-INF, 1], [0, 2]),
    ('+inf is a value (min)', 'min', [INF, 2.0], [0, 1], {}, [INF, 2], [0, 1]),
    ('the lowest int64 is a value', 'max', [-2 ** 63, 5], [0, 1], {}, [-2 ** 63, 5], [0, 1]),
    ('integer mean floors', 'mean', [1, 3, 2, 4, 5, 6], IDX, {}, [1, 4, 0, 6], None),
    ('negative integer mean floors', 'mean', [-3, 0, 7], [0, 0, 1], {}, [-2, 7], None),
    ('ties pick the first (max)', 'max', [2.0, 2, 1], [0, 0, 0], {}, [2], [0]),
    ('ties pick the first (min)', 'min', [1.0, 2, 1], [0, 0, 0], {}, [1], [0]),
    ('NaN never wins', 'max', [NAN, 1.0], [0, 0], {}, [1], [1]),
    ('dim_size adds empty segments', 'max', [1.0, 2], [0, 0], dict(dim_size=3), [2, 0, 0], [1, 2, 2]),
    ('dim_size sum', 'sum', [1.0, 2], [0, 0], dict(dim_size=3), [3, 0, 0], None),
    ('empty src', 'max', [], [], dict(dim_size=2), [0, 0], [0, 0]),
    ('empty src, no dim_size', 'sum', [], [], {}, [], None),
    ('broadcast 1-D index on dim 0', 'sum', X, [0, 1, 0, 2], dict(dim=0), [[4, 6], [5, 6], [7, 8]], None),
    ('broadcast 1-D index, max', 'max', X, [0, 1, 0, 2], dict(dim=0), [[3, 4], [5, 6], [7, 8]],
     [[2, 2], [1, 1], [3, 3]]),
    ('broadcast 1-D index, mean', 'mean', X, [0, 1, 0, 2], dict(dim=0), [[2, 3], [5, 6], [7, 8]], None),
    ('dim < 0 on a 3-D src', 'min', [[[1.0, 2], [5, 6], [3, 4]]], [0, 1, 0], dict(dim=-2),
     [[[1, 2], [5, 6]]], [[[0, 0], [1, 1]]]),
    ('per-row index (README)', 'max', README_SRC, README_IDX, dict(dim=-1),
     [[0, 0, 4, 3, 2, 0], [2, 4, 3, 0, 0, 0]], [[5, 5, 3, 4, 0, 1], [1, 4, 3, 5, 5, 5]]),
    ('per-row index sum', 'sum', README_SRC, README_IDX, dict(dim=1),
     [[0, 0, 4, 3, 3, 0], [2, 4, 4, 0, 0, 0]], None),
    # out= participates
    ('out: sum adds', 'sum', [1.0, 2, 3], [0, 0, 2], dict(out=[10.0, 20, 30]), [13, 20, 33], None),
    ('out: mean divides the total', 'mean', [1.0, 2, 3], [0, 0, 2], dict(out=[10.0, 20, 30]), [6.5, 20, 33], None),
    ('out: max replaces when larger', 'max', [1.0, 7, 3], [0, 0, 1], dict(out=[5.0, -1, 0]), [7, 3, 0],
     [1, 2, 3]),
    ('out: max keeps a larger fill', 'max', [1.0, 2], [0, 1], dict(out=[9.0, 9]), [9, 9], [2, 2]),
    ('out: min returns a smaller fill', 'min', [1.0, 2], [0, 1], dict(out=[0.0, 5]), [0, 2], [2, 1]),
    ('out: fill wins ties', 'max', [3.0], [0], dict(out=[3.0]), [3], [1]),
    ('out: mul multiplies', 'mul', [2.0, 3, 4], [0, 0, 2], dict(out=[10.0, 20, 30]), [60, 20, 120], None),
]


@pytest.mark.parametrize('name, reduce, src, index, kwargs, expected, expected_arg', CASES,
                         ids=[c[0] for c in CASES])
def test_documented_cases(name, reduce, src, index, kwargs, expected, expected_arg):
    src_t = T(src)
    kwargs, ref_kwargs = dict(kwargs), dict(kwargs)
    if 'out' in kwargs:
        kwargs['out'] = T(kwargs['out'], dtype=src_t.dtype)
        ref_kwargs['out'] = kwargs['out'].clone()
    values, arg = call(reduce, src_t, T(index, dtype=torch.long), **kwargs)
    torch.testing.assert_close(values, T(expected, dtype=src_t.dtype))
    if expected_arg is not None:
        assert arg.tolist() == expected_arg
    if 'out' in kwargs:
        assert values is kwargs['out']  # updated in place and returned, as torch_scatter
    ref, ref_arg = scatter_reference(src_t, T(index, dtype=torch.long), reduce=reduce, **ref_kwargs)
    torch.testing.assert_close(ref, T(expected, dtype=src_t.dtype))  # the reference agrees with the table
    if expected_arg is not None:
        assert ref_arg.tolist() == expected_arg


@pytest.mark.parametrize('reduce', ['sum', 'add', 'mean', 'min', 'max', 'mul'])
def test_generic_scatter_returns_values_only(reduce):
    values = scatter(T(SRC), T(IDX), reduce=reduce)
    assert isinstance(values, torch.Tensor)
    torch.testing.assert_close(values, call(reduce, T(SRC), T(IDX))[0])


@pytest.mark.parametrize('index_shape', [(5,), (1, 5, 3), (2, 5, 1), (2, 5), (2, 5, 3), (1, 5, 1)])
@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max', 'min', 'mul'])
def test_index_varying_along_any_dims(index_shape, reduce):
    """The index may vary along dimensions before and/or after ``dim`` and broadcast over the others."""
    g = torch.Generator().manual_seed(6)
    src = torch.randint(-4, 5, (2, 5, 3), generator=g).double()
    index = torch.randint(0, 4, index_shape, generator=g)
    values, arg = call(reduce, src, index, 1, dim_size=5)
    ref, ref_arg = scatter_reference(src, index, 1, dim_size=5, reduce=reduce)
    torch.testing.assert_close(values, ref)
    if ref_arg is not None:
        assert torch.equal(arg, ref_arg)


@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max', 'min'])
def test_src_without_elements_sizes_output_from_expanded_index(reduce):
    """As torch_scatter: the size comes from the broadcast index, which is empty here."""
    values, _ = call(reduce, torch.zeros(2, 0), T([5, 1]), 0)
    assert values.shape == (0, 0)
    assert call(reduce, torch.zeros(2, 0), T([5, 1]), 0, dim_size=3)[0].shape == (3, 0)


def test_int32_index_matches_int64():
    torch.testing.assert_close(scatter_mean(T(X), T([0, 1, 0, 2]).int(), 0), scatter_mean(T(X), T([0, 1, 0, 2]), 0))


# ---------------------------------------------------------------------------------------- CSR and COO
CSR_SRC = [1.0, 3, 2, 4, 5, 6]
CSR_CASES = [
    # reduce, src, indptr, expected, expected arg
    ('sum', CSR_SRC, [0, 2, 2, 5, 6], [4, 0, 11, 6], None),
    ('mean', CSR_SRC, [0, 2, 2, 5, 6], [2, 0, 11 / 3, 6], None),
    ('max', CSR_SRC, [0, 2, 2, 5, 6], [3, 0, 5, 6], [1, 6, 4, 5]),
    ('min', CSR_SRC, [0, 2, 2, 5, 6], [1, 0, 2, 6], [0, 6, 2, 5]),
    ('sum', CSR_SRC, [1, 3, 4], [5, 4], None),             # rows outside [indptr[0], indptr[-1]) ignored
    ('max', CSR_SRC, [1, 3, 4], [3, 4], [1, 3]),
    ('sum', CSR_SRC, [3], [], None),                       # no segments
    ('max', [[1.0, 2, 3, 4], [5, 6, 7, 8]], [[0, 1, 4], [0, 3, 4]], [[1, 4], [7, 8]], [[0, 3], [2, 3]]),
    ('sum', [[1.0, 2, 3, 4], [5, 6, 7, 8]], [[0, 2, 4]], [[3, 7], [11, 15]], None),  # indptr broadcast
]


@pytest.mark.parametrize('reduce, src, indptr, expected, expected_arg', CSR_CASES)
def test_segment_csr_cases(reduce, src, indptr, expected, expected_arg):
    src_t, indptr_t = T(src), T(indptr)
    values = segment_csr(src_t, indptr_t, reduce=reduce)
    torch.testing.assert_close(values, T(expected, dtype=values.dtype).view(values.shape))
    ref, ref_arg = segment_csr_reference(src_t, indptr_t, reduce)
    torch.testing.assert_close(ref, values)
    if expected_arg is not None:
        fn = segment_max_csr if reduce == 'max' else segment_min_csr
        assert fn(src_t, indptr_t)[1].tolist() == expected_arg == ref_arg.tolist()


def test_segment_csr_overwrites_out_and_named_variants():
    out = T([100.0, 100, 100, 100])
    result = segment_csr(T(CSR_SRC), T([0, 2, 2, 5, 6]), out=out)
    assert result is out and out.tolist() == [4, 0, 11, 6]  # out does not participate in CSR
    torch.testing.assert_close(segment_add_csr(T(CSR_SRC), T([0, 2, 6])), T([4.0, 17]))
    torch.testing.assert_close(segment_mean_csr(T(CSR_SRC), T([0, 2, 6])), T([2.0, 17 / 4]))


def test_segment_coo_cases():
    src, index = T(CSR_SRC), T([0, 0, 1, 1, 1, 3])
    torch.testing.assert_close(segment_coo(src, index), T([4.0, 11, 0, 6]))
    torch.testing.assert_close(segment_sum_coo(src, index, dim_size=5), T([4.0, 11, 0, 6, 0]))
    torch.testing.assert_close(segment_mean_coo(src, index), T([2.0, 11 / 3, 0, 6]))
    torch.testing.assert_close(segment_coo(src, index, reduce='max'), T([3.0, 5, 0, 6]))
    assert segment_max_coo(src, index)[1].tolist() == [1, 4, 6, 5]
    assert segment_min_coo(src, index)[1].tolist() == [0, 2, 6, 5]
    batched = segment_coo(T([[[1.0], [2], [3]], [[4], [5], [6]]]), T([[0, 0, 1], [0, 1, 1]]))
    assert batched.tolist() == [[[3.0], [3]], [[4], [11]]]
    out = T([1.0, 1, 1, 1])
    assert segment_coo(src, index, out=out) is out and out.tolist() == [5, 12, 1, 7]  # COO: out participates


# ---------------------------------------------------------------------------------------- properties
@st.composite
def scatter_problems(draw):
    ndim = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim))
    dim = draw(st.integers(-ndim, ndim - 1))
    seed = draw(st.integers(0, 2**31 - 1))
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.int64]))
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(-3, 4, shape, generator=g).to(dtype)  # duplicates and ties
    num_segments = draw(st.integers(1, 5))
    if draw(st.booleans()):  # 1-D index along dim
        index = torch.randint(0, num_segments, (shape[dim],), generator=g)
    else:  # index over the leading dims up to dim (trailing dims broadcast)
        index = torch.randint(0, num_segments, shape[:dim % ndim + 1], generator=g)
    dim_size = draw(st.sampled_from([None, num_segments + 1]))
    out = None
    if draw(st.booleans()):
        out_shape = list(shape)
        out_shape[dim] = num_segments + 1
        out = torch.randint(-3, 4, out_shape, generator=g).to(dtype)
    return src, index, dim, out, dim_size


@settings(max_examples=80, deadline=None)
@given(scatter_problems(), st.sampled_from(['sum', 'mean', 'max', 'min', 'mul']))
def test_property_matches_reference(problem, reduce):
    src, index, dim, out, dim_size = problem
    ref, ref_arg = scatter_reference(src, index, dim, out, dim_size, reduce)
    values, arg = call(reduce, src, index, dim, out.clone() if out is not None else None, dim_size)
    torch.testing.assert_close(values, ref, atol=1e-5, rtol=1e-6)
    if ref_arg is not None:
        assert torch.equal(arg, ref_arg)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=6), st.integers(0, 3),
       st.sampled_from(['sum', 'mean', 'max', 'min', 'mul']), st.integers(0, 2**31 - 1))
def test_property_csr_equals_coo(lengths, width, reduce, seed):
    """segment_csr over offsets == segment_coo over the expanded sorted index == the loop reference."""
    total = sum(lengths)
    src = torch.randint(-3, 4, (total, width), generator=torch.Generator().manual_seed(seed)).double()
    indptr = torch.tensor([0] + lengths).cumsum(0)
    index = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    csr = segment_csr(src, indptr, reduce=reduce)
    coo = segment_coo(src, index, dim_size=len(lengths), reduce=reduce)
    torch.testing.assert_close(csr, coo)
    torch.testing.assert_close(csr, segment_csr_reference(src, indptr, reduce)[0])


# ------------------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max', 'min', 'mul'])
@pytest.mark.parametrize('dim, index', [(0, T([0, 2, 2, 0, 3])), (1, T([[0, 1, 1, 0, 3], [2, 2, 0, 0, 0]]))])
def test_gradcheck_scatter(reduce, dim, index):
    src = torch.randn(2, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    src = (src.transpose(0, 1) if dim == 0 else src).contiguous().requires_grad_()  # (5, 2, 3) or (2, 5, 3)
    assert torch.autograd.gradcheck(lambda s: call(reduce, s, index, dim, dim_size=5)[0], (src,))


@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max', 'min', 'mul'])
def test_gradcheck_with_out(reduce):
    g = torch.Generator().manual_seed(1)
    src = torch.randn(6, 2, dtype=torch.float64, generator=g).requires_grad_()
    out = torch.randn(4, 2, dtype=torch.float64, generator=g).requires_grad_()
    index = T([0, 1, 0, 1, 1, 3])
    assert torch.autograd.gradcheck(lambda s, o: call(reduce, s, index, 0, out=o.clone())[0], (src, out))


@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max', 'min', 'mul'])
def test_gradcheck_segment_csr_coo(reduce):
    src = torch.randn(7, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: segment_csr(s, T([0, 3, 3, 6]), reduce=reduce), (src,))
    assert torch.autograd.gradcheck(lambda s: segment_coo(s, T([0, 0, 1, 1, 1, 3, 3]), reduce=reduce), (src,))


# ------------------------------------------------------------------------------------- invalid inputs
@pytest.mark.parametrize('fn, args, kwargs, error, match', [
    (scatter_sum, (T(SRC), T([0, 1, -1, 1, 1, 3])), {}, ValueError, 'index contains -1'),
    (scatter_max, (T(SRC), T(IDX)), dict(dim_size=2), ValueError, r'index contains 3, expected values in \[0, 2\)'),
    (scatter_sum, (T(SRC), T(IDX).float()), {}, TypeError, 'index must have one of the dtypes'),
    (scatter_sum, (T(SRC).to(torch.complex64), T(IDX)), {}, TypeError, 'src must have one of the dtypes'),
    (scatter_mean, (T(SRC).bool(), T(IDX)), {}, TypeError, "reduce='mean' needs a numeric src"),
    (scatter_sum, ([1.0, 2.0], T(IDX)), {}, TypeError, 'src must be a torch.Tensor'),
    (scatter_sum, (T(SRC), T(IDX)), dict(dim_size=2.0), TypeError, 'dim_size must be an int or None'),
    (scatter, (T(SRC), T(IDX)), dict(reduce=None), TypeError, 'reduce must be a str'),
    (scatter_sum, (T(SRC), T(IDX)[:4]), {}, ValueError, 'does not broadcast'),
    (scatter_sum, (T(X), T([[[0]]])), dict(dim=0), ValueError, 'more dimensions than src'),
    (scatter_sum, (T(SRC), T(IDX)), dict(dim=1), ValueError, r'dim must be in \[-1, 1\)'),
    (scatter_sum, (T(SRC), T(IDX)), dict(dim=0.5), TypeError, 'dim must be an int'),
    (scatter_sum, (T(SRC), T(IDX)), dict(dim_size=-1), ValueError, 'dim_size must be >= 0'),
    (scatter_sum, (T(SRC), T(IDX)), dict(out=T([0, 0, 0, 0])), TypeError, 'out must have dtype'),
    (scatter_sum, (T(X), T([0, 1, 0, 2])), dict(dim=0, out=torch.zeros(3, 3)), ValueError, 'out must have the shape'),
    (scatter, (T(SRC), T(IDX)), dict(reduce='prod'), ValueError, 'reduce must be one of'),
    (segment_coo, (T(SRC), T([0, 1, 0, 1, 1, 3])), {}, ValueError, 'must be sorted'),
    (segment_coo, (T(SRC), T([[0]])), {}, ValueError, 'at most src.dim'),
    (segment_csr, (T(SRC), T([0, 3, 2, 6])), {}, ValueError, 'indptr must be sorted'),
    (segment_csr, (T(SRC), T([0, 3, 7])), {}, ValueError, r'indptr contains 7, expected values in \[0, 7\)'),
    (segment_csr, (T(SRC), T([-1, 3, 6])), {}, ValueError, 'indptr contains -1'),
    (segment_csr, (T(SRC), T([0, 3, 6]).float()), {}, TypeError, 'indptr must have one of the dtypes'),
    (segment_csr, (T(X), T([[0, 1], [0, 1], [0, 1]])), {}, ValueError, 'does not match the leading'),
    (segment_csr, (T(SRC), T([0, 3, 6])), dict(out=torch.zeros(3)), ValueError, r'out.shape\[0\] must be'),
    (segment_csr, (T(SRC), T([0, 3, 6])), dict(reduce='std'), ValueError, 'reduce must be one of'),
    # were 'Storage size calculation overflowed' (naming neither the op nor dim_size) and, for a meta index,
    # 'Tensor.item() cannot be called on meta tensors' from the sortedness check
    (scatter_max, (T(X), T([0, 1, 0, 2])), dict(dim=0, dim_size=2 ** 40), ValueError,
     r'scatter_max: dim_size=1099511627776 asks for an output of .* more than the .* of memory on cpu; expected a'),
    (scatter_sum, (T(X), T([0, 1, 0, 2])), dict(dim=0, dim_size=2 ** 62), ValueError,
     r"scatter_sum: dim_size=4611686018427387904 gives an output of 4611686018427387904 x 2 "),
    (scatter_max, (T(SRC), T([0, 1, 0, 2 ** 63 - 1, 1, 3])), {}, ValueError,
     r'dim_size \(index.max\(\) \+ 1\)=9223372036854775808 gives an output'),
    (segment_coo, (T(SRC), T(IDX).to('meta')), {}, ValueError, 'got src on cpu, index on meta'),
])
def test_invalid_inputs_raise(fn, args, kwargs, error, match):
    with pytest.raises(error, match=match) as raised:
        fn(*args, **kwargs)
    assert isinstance(raised.value, RuntimeError)  # the type torch_scatter raises: code catching it keeps working


# ----------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max', 'min', 'mul'])
def test_cuda_matches_cpu(reduce):
    src = torch.randint(-5, 5, (3, 400, 4), generator=torch.Generator().manual_seed(4)).float()
    index = torch.randint(0, 50, (3, 400), generator=torch.Generator().manual_seed(5))
    for idx in (index, index[0]):
        cpu = call(reduce, src, idx, 1, dim_size=60)
        gpu = call(reduce, src.cuda(), idx.cuda(), 1, dim_size=60)
        torch.testing.assert_close(gpu[0].cpu(), cpu[0])
        if cpu[1] is not None:
            assert torch.equal(gpu[1].cpu(), cpu[1])
    indptr = T([0, 10, 10, 200, 400])   # segments along dim 0 of the (400, 4) rows
    torch.testing.assert_close(segment_csr(src[0].cuda(), indptr.cuda(), reduce=reduce).cpu(),
                               segment_csr(src[0], indptr, reduce=reduce))
