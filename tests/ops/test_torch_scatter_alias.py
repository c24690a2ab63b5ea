"""fsdlite.ops.torch_scatter as a drop-in for torch_scatter: its names and signatures, every function under
torch.jit.script (same values as eager, errors still name the argument) and traced whole by torch.compile."""
import inspect
import warnings

import pytest
import torch

import fsdlite.ops.torch_scatter as torch_scatter

T = torch.tensor
SRC = torch.tensor([[1.0, 2], [5, 6], [3, 4], [7, 8], [9, 10], [11, 12]])
IDX = T([0, 1, 0, 1, 1, 3])
SORTED = T([0, 0, 1, 1, 1, 3])
INDPTR = T([0, 2, 5, 5, 6])

# torch_scatter 2.1's public functions: (parameter names, defaults of the optional ones)
SIGNATURES = {
    'scatter': (['src', 'index', 'dim', 'out', 'dim_size', 'reduce'], [-1, None, None, 'sum']),
    **{f'scatter_{r}': (['src', 'index', 'dim', 'out', 'dim_size'], [-1, None, None])
       for r in ('sum', 'add', 'mul', 'mean', 'min', 'max')},
    'segment_csr': (['src', 'indptr', 'out', 'reduce'], [None, 'sum']),
    **{f'segment_{r}_csr': (['src', 'indptr', 'out'], [None]) for r in ('sum', 'add', 'mean', 'min', 'max')},
    'segment_coo': (['src', 'index', 'out', 'dim_size', 'reduce'], [None, None, 'sum']),
    **{f'segment_{r}_coo': (['src', 'index', 'out', 'dim_size'], [None, None])
       for r in ('sum', 'add', 'mean', 'min', 'max')},
    'gather_csr': (['src', 'indptr', 'out'], [None]),
    'gather_coo': (['src', 'index', 'out'], [None]),
    'scatter_std': (['src', 'index', 'dim', 'out', 'dim_size', 'unbiased'], [-1, None, None, True]),
    'scatter_logsumexp': (['src', 'index', 'dim', 'out', 'dim_size', 'eps'], [-1, None, None, 1e-12]),
    'scatter_softmax': (['src', 'index', 'dim', 'dim_size'], [-1, None]),
    'scatter_log_softmax': (['src', 'index', 'dim', 'eps', 'dim_size'], [-1, 1e-12, None]),
}


def sample_args(name):
    """Positional arguments for one call of the named function."""
    if name.startswith('gather'):
        return (SRC[:4], INDPTR if name.endswith('csr') else SORTED)
    if 'csr' in name:
        return (SRC, INDPTR)
    if 'coo' in name:
        return (SRC, SORTED)
    return (SRC, IDX, 0)


def scripted(fn):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)  # torch.jit.script is deprecated in torch 2.13
        return torch.jit.script(fn)


@pytest.mark.parametrize('name', sorted(SIGNATURES))
def test_same_names_and_signatures_as_torch_scatter(name):
    params = inspect.signature(getattr(torch_scatter, name)).parameters
    names, defaults = SIGNATURES[name]
    assert list(params) == names
    assert [p.default for p in params.values() if p.default is not inspect.Parameter.empty] == defaults


def test_exports_every_function():
    assert set(SIGNATURES) <= set(torch_scatter.__all__)
    assert torch_scatter.__version__.startswith('2.1')


@pytest.mark.parametrize('name', sorted(SIGNATURES))
def test_scripted_equals_eager(name):
    fn = getattr(torch_scatter, name)
    args = sample_args(name)
    eager, script = fn(*args), scripted(fn)(*args)
    eager, script = (eager, script) if isinstance(eager, tuple) else ((eager,), (script,))
    for a, b in zip(eager, script):
        assert torch.equal(a, b)


def test_scripted_out_and_keywords():
    out = torch.full((4, 2), -2.0)
    scripted(torch_scatter.scatter)(SRC, IDX, 0, out, None, 'mul')
    assert torch.equal(out, torch_scatter.scatter(SRC, IDX, 0, torch.full((4, 2), -2.0), reduce='mul'))
    std = scripted(torch_scatter.scatter_std)(SRC, IDX, dim=0, unbiased=False)
    assert torch.equal(std, torch_scatter.scatter_std(SRC, IDX, dim=0, unbiased=False))


@pytest.mark.parametrize('name, args, match', [
    ('scatter_sum', (SRC, T([0, 1, -1, 1, 1, 3]), 0), r'scatter_sum: index contains -1, expected values in \[0, 4\)'),
    ('segment_sum_coo', (SRC, IDX), r'segment_sum_coo: index must be sorted'),
    ('gather_csr', (SRC, INDPTR), r'gather_csr: src.shape\[0\] must be indptr.shape\[-1\] - 1 = 4'),
    ('scatter_softmax', (SRC.long(), IDX, 0), 'src must be a floating-point tensor, got torch.int64'),
])
def test_scripted_errors_name_the_argument(name, args, match):
    with pytest.raises(torch.jit.Error, match=match):
        scripted(getattr(torch_scatter, name))(*args)


def test_torch_compile_traces_everything_in_one_graph():
    """fullgraph=True: no graph break anywhere (dim_size / out given), forward and backward equal eager."""
    def run(src):
        total = torch_scatter.scatter_sum(src, IDX, 0, dim_size=4).sum()
        total = total + torch_scatter.scatter_max(src, IDX, 0, dim_size=4)[0].sum()
        total = total + torch_scatter.scatter_mul(src, IDX, 0, dim_size=4).sum()
        total = total + torch_scatter.scatter_mean(src, IDX, 0, dim_size=4).sum()
        reduced = torch_scatter.segment_csr(src, INDPTR, reduce='mean')
        total = total + torch_scatter.gather_csr(reduced, INDPTR, out=src.new_zeros(6, 2)).sum()
        total = total + torch_scatter.segment_coo(src, SORTED, dim_size=4, reduce='min').sum()
        total = total + torch_scatter.gather_coo(reduced, SORTED).sum()
        total = total + torch_scatter.scatter_softmax(src, IDX, 0, dim_size=4).pow(2).sum()
        total = total + torch_scatter.scatter_log_softmax(src, IDX, 0, dim_size=4).sum()
        total = total + torch_scatter.scatter_logsumexp(src, IDX, 0, dim_size=4).sum()
        return total + torch_scatter.scatter_std(src, IDX, 0, dim_size=4).sum()

    torch._dynamo.reset()
    src = SRC.double().requires_grad_()
    compiled = torch.compile(run, fullgraph=True, backend='aot_eager')(src)
    (grad_compiled,) = torch.autograd.grad(compiled, src)
    eager = run(src)
    (grad_eager,) = torch.autograd.grad(eager, src)
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(grad_compiled, grad_eager)


def test_compiled_call_still_rejects_a_bad_index():
    """Tracing skips the data-dependent checks; the kernel still checks the real data."""
    torch._dynamo.reset()
    fn = torch.compile(lambda s, i: torch_scatter.scatter_sum(s, i, 0, dim_size=4), fullgraph=True,
                       backend='aot_eager')
    with pytest.raises(RuntimeError, match=r'index contains [-0-9]+, expected values in \[0, 4\)'):
        fn(SRC, T([0, 1, 0, 1, 1, 4]))


@pytest.mark.parametrize('reduce', ['sum', 'add', 'mean', 'min', 'max'])
def test_zero_element_inputs_flow_through_every_function(reduce):
    """(0, 0, 0, 16) values with an empty index / indptr: every function returns (0, 0, 0, 16) and back-propagates."""
    x = torch.randn(0, 0, 0, 16, dtype=torch.float64, requires_grad=True)
    index, indptr = torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)
    for out in (torch_scatter.scatter(x, index, dim=0, dim_size=0, reduce=reduce),
                torch_scatter.segment_coo(x, index, dim_size=0, reduce=reduce), torch_scatter.gather_coo(x, index),
                torch_scatter.segment_csr(x, indptr, reduce=reduce), torch_scatter.gather_csr(x, indptr)):
        assert out.shape == (0, 0, 0, 16)
        out.backward(torch.randn_like(out))


UPSTREAM_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64]


@pytest.mark.parametrize('dtype', UPSTREAM_DTYPES + [torch.int16, torch.int8, torch.uint8])
@pytest.mark.parametrize('reduce', ['sum', 'mean', 'mul', 'min', 'max'])
def test_every_dtype_on_transposed_inputs(dtype, reduce):
    """Small integers in every dtype (exact), src and index non-contiguous, against the reference."""
    from fsdlite.ops.scatter.reference import scatter_reference
    g = torch.Generator().manual_seed(11)
    src = torch.randint(1, 4, (3, 8), generator=g).to(dtype).t()  # (8, 3), non-contiguous
    index = torch.randint(0, 4, (3, 8), generator=g).t()
    values = torch_scatter.scatter(src, index, 0, dim_size=5, reduce=reduce)
    expected, _ = scatter_reference(src, index, 0, dim_size=5, reduce=reduce)
    assert values.dtype == dtype and torch.equal(values, expected)
    ptr = T([0, 3, 3, 8])
    assert torch.equal(torch_scatter.segment_csr(src, ptr, reduce=reduce),
                       torch_scatter.segment_csr(src.contiguous(), ptr, reduce=reduce))
    assert torch.equal(torch_scatter.gather_csr(src[:3], ptr), torch_scatter.gather_csr(src[:3].contiguous(), ptr))


def test_bool_sources_sum_like_torch_scatter():
    """torch_scatter sums bool / int8 / uint8 sources (scatter_add_); they were refused."""
    src, index = T([True, False, True, False]), T([0, 0, 1, 2])
    assert torch_scatter.scatter_sum(src, index).tolist() == [True, True, False]
    assert torch_scatter.scatter_max(src, index)[0].tolist() == [True, True, False]
