"""gather_coo / gather_csr and the composites scatter_softmax / scatter_log_softmax / scatter_logsumexp / scatter_std:
hand-computed tables, properties against the loop references (torch.softmax, torch.logsumexp, torch.std per
segment), float64 gradcheck, ``out`` semantics, invalid inputs, CUDA."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.ops import (gather_coo, gather_csr, scatter_log_softmax, scatter_logsumexp, scatter_softmax, scatter_std,
                         segment_coo, segment_csr)
from fsdlite.ops.scatter.reference import composite_reference, gather_coo_reference, gather_csr_reference

T = torch.tensor
NAN, INF = float('nan'), float('inf')
COMPOSITES = {'softmax': scatter_softmax, 'log_softmax': scatter_log_softmax, 'logsumexp': scatter_logsumexp,
              'std': scatter_std}


# --------------------------------------------------------------------------------------------- gathers
GATHER_CASES = [
    # src, index, indptr, expected
    ([1, 2, 3, 4], [0, 0, 1, 1, 1, 3], [0, 2, 5, 5, 6], [1, 1, 2, 2, 2, 4]),
    ([[1, 2], [3, 4], [5, 6], [7, 8]], [0, 0, 1, 1, 1, 3], [0, 2, 5, 5, 6],
     [[1, 2], [1, 2], [3, 4], [3, 4], [3, 4], [7, 8]]),
    ([[1, 3, 5, 7], [2, 4, 6, 8]], [[0, 0, 1, 1, 1, 3], [0, 0, 0, 1, 1, 2]], [[0, 2, 5, 5, 6], [0, 3, 5, 6, 6]],
     [[1, 1, 3, 3, 3, 7], [2, 2, 2, 4, 4, 6]]),
    ([[1], [2]], [[0, 0], [0, 0]], [[0, 2], [0, 2]], [[1, 1], [2, 2]]),
]


@pytest.mark.parametrize('src, index, indptr, expected', GATHER_CASES)
@pytest.mark.parametrize('dtype', [torch.float32, torch.int64, torch.int8, torch.bool])
def test_gather_cases(src, index, indptr, expected, dtype):
    src_t, expected_t = T(src).to(dtype), T(expected).to(dtype)
    assert torch.equal(gather_coo(src_t, T(index)), expected_t)
    assert torch.equal(gather_csr(src_t, T(indptr)), expected_t)
    assert torch.equal(gather_coo_reference(src_t, T(index)), expected_t)
    length = expected_t.shape[T(index).dim() - 1]
    assert torch.equal(gather_csr_reference(src_t, T(indptr), length), expected_t)
    out = torch.zeros_like(expected_t)
    assert gather_csr(src_t, T(indptr), out) is out and torch.equal(out, expected_t)


def test_gather_csr_outside_the_offsets_is_zero_and_out_sets_the_length():
    assert gather_csr(T([5.0, 7.0]), T([1, 3, 4])).tolist() == [0, 5, 5, 7]  # positions before indptr[0]
    assert gather_csr(T([5.0, 7.0]), T([0, 1, 2]), torch.full((4,), 9.0)).tolist() == [5, 7, 0, 0]


def test_gather_coo_takes_any_order_and_int32():
    assert gather_coo(T([10, 20, 30]), T([2, 0, 2, 1]).int()).tolist() == [30, 10, 30, 20]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=6), st.integers(0, 3), st.integers(0, 2**31 - 1))
def test_property_gathers_invert_segments(lengths, width, seed):
    """gather_csr / gather_coo match their loop references, and segment_* sum of a gather is length * value."""
    src = torch.randint(-3, 4, (len(lengths), width), generator=torch.Generator().manual_seed(seed)).double()
    indptr = torch.tensor([0] + lengths).cumsum(0)
    index = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths, dtype=torch.long))
    gathered = gather_csr(src, indptr)
    assert torch.equal(gathered, gather_csr_reference(src, indptr, sum(lengths)))
    assert torch.equal(gather_coo(src, index), gathered)
    counts = torch.tensor(lengths, dtype=torch.float64).view(-1, 1)
    torch.testing.assert_close(segment_csr(gathered, indptr), src * counts)
    torch.testing.assert_close(segment_coo(gathered, index, dim_size=len(lengths)), src * counts)


def test_gather_gradcheck():
    src = torch.randn(2, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_()
    indptr, index = T([[0, 2, 5, 5, 6], [0, 3, 5, 6, 6]]), T([[0, 0, 1, 1, 1, 3], [0, 0, 0, 1, 1, 2]])
    assert torch.autograd.gradcheck(lambda s: gather_csr(s, indptr), (src,))
    assert torch.autograd.gradcheck(lambda s: gather_coo(s, index), (src,))


# ------------------------------------------------------------------------------------------ composites
def test_composites_table():
    src, index = T([0.2, 0, 0.2, -2.1, 3.2, 7, -1, -INF]), T([0, 1, 0, 1, 1, 2, 4, 4])
    expected = torch.cat([torch.softmax(T([0.2, 0.2]), 0), torch.softmax(T([0, -2.1, 3.2]), 0),
                          torch.softmax(T([7.0]), 0), torch.softmax(T([-1, -INF]), 0)])
    order = T([0, 2, 1, 3, 4, 5, 6, 7])  # positions of the values in `expected` order
    torch.testing.assert_close(scatter_softmax(src, index)[order], expected)
    torch.testing.assert_close(scatter_log_softmax(src, index)[order], expected.log())
    lse = scatter_logsumexp(src, index)
    torch.testing.assert_close(lse, T([torch.logsumexp(T([0.2, 0.2]), 0), torch.logsumexp(T([0, -2.1, 3.2]), 0), 7.0,
                                       0.0, -1.0]))
    std = scatter_std(T([[2.0, 0, 1, 4, 3], [0, 2, 1, 3, 4]]), T([[0] * 5, [1] * 5]), dim=-1)
    s = T([2.0, 0, 1, 4, 3]).std()
    torch.testing.assert_close(std, T([[s, 0], [0, s]]))


@pytest.mark.parametrize('src, expected', [
    ([-INF, -INF], [-INF, 0.0]),   # only -inf: -inf (torch.logsumexp; torch_scatter gives 0); empty: 0
    ([INF, 1.0], [INF, 0.0]),      # +inf stays +inf (torch_scatter: the dtype's largest value)
    ([NAN, 1.0], [NAN, 0.0]),      # NaN propagates
])
def test_logsumexp_edge_values(src, expected):
    out = scatter_logsumexp(T(src), T([0, 0]), dim_size=2)
    torch.testing.assert_close(out, T(expected), equal_nan=True)


def test_logsumexp_out_takes_part_without_overflow():
    out = T([-10.0, -10.0, 100.0])
    result = scatter_logsumexp(T([-1.0, -50.0, 0.0]), T([0, 0, 2]), out=out)
    assert result is out
    torch.testing.assert_close(out, T([torch.logsumexp(T([-1.0, -50, -10]), 0), -10.0, 100.0]))


def test_std_one_value_and_out():
    src = T([3.0, 1.0, 5.0], dtype=torch.float64)
    assert scatter_std(src, T([0, 1, 1])).tolist() == [0.0, 8 ** 0.5]
    assert scatter_std(src, T([0, 1, 1]), unbiased=False).tolist() == [0.0, 2.0]
    out = T([8.0, 0.0], dtype=torch.float64)  # added to the sum of squared deviations, as torch_scatter
    assert scatter_std(src, T([0, 1, 1]), out=out) is out and out.tolist() == [8 ** 0.5, 8 ** 0.5]


@st.composite
def composite_problems(draw):
    ndim = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim))
    dim = draw(st.integers(-ndim, ndim - 1))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    src = torch.randint(-4, 5, shape, generator=g).double() / 2  # duplicates and ties
    num_segments = draw(st.integers(1, 4))
    if draw(st.booleans()):
        index = torch.randint(0, num_segments, (shape[dim],), generator=g)
    else:
        index = torch.randint(0, num_segments, shape[:dim % ndim + 1], generator=g)
    return src, index, dim, num_segments + draw(st.integers(0, 1))


@settings(max_examples=60, deadline=None)
@given(composite_problems(), st.sampled_from(sorted(COMPOSITES)), st.booleans())
def test_property_composites_match_references(problem, name, unbiased):
    src, index, dim, dim_size = problem
    kwargs = dict(unbiased=unbiased) if name == 'std' else {}
    got = COMPOSITES[name](src, index, dim, dim_size=dim_size, **kwargs)
    expected = composite_reference(name, src, index, dim, dim_size, unbiased)
    torch.testing.assert_close(got, expected, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize('name', sorted(COMPOSITES))
@pytest.mark.parametrize('dim, index', [(0, T([0, 2, 2, 0, 3])), (1, T([[0, 1, 1, 0, 3], [2, 2, 0, 0, 0]]))])
def test_composites_gradcheck(name, dim, index):
    src = torch.randn(2, 5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    src = (src.transpose(0, 1) if dim == 0 else src).contiguous().requires_grad_()
    fn = COMPOSITES[name]
    assert torch.autograd.gradcheck(lambda s: fn(s, index, dim, dim_size=5), (src,))


def test_std_gradient_is_finite_where_a_deviation_is_zero():
    src = T([1.0, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    scatter_std(src, T([0, 0, 1]), dim_size=3).sum().backward()
    assert torch.isfinite(src.grad).all()


# ------------------------------------------------------------------------------------- invalid inputs
@pytest.mark.parametrize('fn, args, error, match', [
    (scatter_softmax, (T([1, 2]), T([0, 0])), TypeError, 'src must be a floating-point tensor'),
    (scatter_std, (T([1.0, 2]), T([0, -1])), ValueError, 'index contains -1'),
    (scatter_logsumexp, (T([1.0, 2]), T([0, 0]), 0, torch.zeros(2, 2)), ValueError, 'out must have the shape'),
    (gather_coo, (T([1.0, 2]), T([0, 2])), ValueError, r'index contains 2, expected values in \[0, 2\)'),
    (gather_coo, (T([[1.0, 2]]), T([[0], [0], [0]])), ValueError, 'does not match the leading dimensions'),
    (gather_csr, (T([1.0, 2]), T([0, 2, 1])), ValueError, 'indptr must be sorted'),
    (gather_csr, (T([1.0, 2, 3]), T([0, 2, 3])), ValueError, r'src.shape\[0\] must be indptr.shape\[-1\] - 1 = 2'),
    (gather_csr, (T([1.0, 2]), T([0, 2, 3]).float()), TypeError, 'indptr must have one of the dtypes'),
    (gather_csr, (T([1.0, 2]), T([0, 1, 2]), torch.zeros(2, dtype=torch.int64)), ValueError, 'out must have dtype'),
])
def test_invalid_inputs_raise(fn, args, error, match):
    with pytest.raises(error, match=match) as raised:
        fn(*args)
    assert isinstance(raised.value, RuntimeError)


# ----------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize('name', sorted(COMPOSITES))
def test_cuda_composites_and_gathers_match_cpu(name):
    g = torch.Generator().manual_seed(4)
    src = torch.randn(3, 400, 4, generator=g, dtype=torch.float64)
    index = torch.randint(0, 50, (3, 400), generator=g)
    cpu = COMPOSITES[name](src, index, 1, dim_size=60)
    torch.testing.assert_close(COMPOSITES[name](src.cuda(), index.cuda(), 1, dim_size=60).cpu(), cpu)
    indptr = T([0, 10, 10, 200, 400])
    rows = torch.randn(4, 3, generator=g)
    torch.testing.assert_close(gather_csr(rows.cuda(), indptr.cuda()).cpu(), gather_csr(rows, indptr))
