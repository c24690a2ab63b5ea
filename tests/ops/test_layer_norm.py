"""layer_norm_rows: torch's LayerNorm as golden, the pure-torch reference, properties (register and generic
kernels, float64, thread counts), gradcheck, opcheck, invalid inputs, CUDA; and RowLayerNorm (the module)."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fsdlite.ops import layer_norm_rows
from fsdlite.ops.layer_norm.reference import layer_norm_rows_reference


def problem(rows, channels, dtype=torch.float32, seed=0, scale=1.0, shift=0.0):
    """Seeded (x (rows, C), weight (C,), bias (C,)) with a non-trivial affine part."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, channels, generator=g, dtype=torch.float64) * scale + shift).to(dtype)
    weight = torch.randn(channels, generator=g, dtype=torch.float64).to(dtype)
    bias = torch.randn(channels, generator=g, dtype=torch.float64).to(dtype)
    return x, weight, bias


def tolerance(dtype):
    return dict(atol=2e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)


# ------------------------------------------------------------------------------ golden (torch) and reference
# C = 8 .. 128 in steps of 8 take the float32 register kernel on AVX2 CPUs; the others the generic loop
@pytest.mark.parametrize('channels', [1, 3, 8, 12, 16, 24, 32, 40, 64, 72, 128, 136, 200])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_matches_torch_layer_norm(channels, dtype):
    x, weight, bias = problem(517, channels, dtype, seed=channels)
    out = layer_norm_rows(x, weight, bias, 1e-5)
    assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
    torch.testing.assert_close(out, F.layer_norm(x, (channels,), weight, bias, 1e-5), **tolerance(dtype))
    torch.testing.assert_close(out, layer_norm_rows_reference(x, weight, bias, 1e-5), **tolerance(dtype))


def test_no_rows_and_one_channel():
    x, weight, bias = problem(0, 16)
    assert layer_norm_rows(x, weight, bias).shape == (0, 16)
    x, weight, bias = problem(5, 1)
    # one channel: x - mean is 0, so every row is the bias
    assert torch.equal(layer_norm_rows(x, weight, bias), bias.expand(5, 1))


def test_constant_rows_give_the_bias_and_eps_matters():
    weight, bias = torch.full((32,), 2.0), torch.arange(32.0)
    x = torch.full((4, 32), 3.5)
    assert torch.equal(layer_norm_rows(x, weight, bias), bias.expand(4, 32))
    x = torch.tensor([[0.0, 1e-3] * 16])  # variance 2.5e-7: eps=1e-5 dominates it
    for eps in (1e-5, 1e-1):
        torch.testing.assert_close(layer_norm_rows(x, weight, bias, eps), F.layer_norm(x, (32,), weight, bias, eps))


def test_non_contiguous_inputs():
    x, weight, bias = problem(64, 64)
    xt = x.t().contiguous().t()[:, ::2]  # strided rows of 32 channels
    w, b = weight[::2], bias[::2]
    assert not xt.is_contiguous() and not w.is_contiguous()
    torch.testing.assert_close(layer_norm_rows(xt, w, b), F.layer_norm(xt, (32,), w, b), **tolerance(torch.float32))


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(0, 300), channels=st.integers(1, 160), seed=st.integers(0, 2 ** 16),
       scale=st.sampled_from([1e-3, 1.0, 1e3]), shift=st.sampled_from([0.0, -7.0, 1e3]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_property_matches_reference(rows, channels, seed, scale, shift, dtype):
    # float32 rows far from zero relative to their spread lose ~|shift| / scale ulps in the centring (torch's kernel
    # as well): the well-conditioned ones are compared
    assume(dtype == torch.float64 or abs(shift) / scale <= 1e3)
    x, weight, bias = problem(rows, channels, dtype, seed, scale, shift)
    out = layer_norm_rows(x, weight, bias, 1e-5)
    ref = layer_norm_rows_reference(x.double(), weight.double(), bias.double(), 1e-5).to(dtype)
    atol = 1e-10 if dtype == torch.float64 else 1e-4 + 1e-6 * abs(shift) / scale
    torch.testing.assert_close(out, ref, atol=atol, rtol=1e-4)


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 100), channels=st.integers(2, 96), seed=st.integers(0, 2 ** 16),
       a=st.floats(0.5, 4.0), c=st.floats(-10.0, 10.0))
def test_property_affine_invariance_and_row_independence(rows, channels, seed, a, c):
    """Normalizing ``a * x + c`` (a > 0) gives the same rows; permuting rows permutes the result."""
    x, weight, bias = problem(rows, channels, torch.float64, seed)
    eps = 1e-200  # negligible against any row's variance (it scales with a^2 and would change the result)
    out = layer_norm_rows(x, weight, bias, eps)
    torch.testing.assert_close(layer_norm_rows(a * x + c, weight, bias, eps), out, atol=1e-7, rtol=1e-7)
    perm = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(layer_norm_rows(x[perm], weight, bias, eps), out[perm])


def test_thread_count_does_not_change_the_result():
    x, weight, bias = problem(20_000, 32)
    one = layer_norm_rows(x, weight, bias)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = layer_norm_rows(x, weight, bias)
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(one, two)


# ----------------------------------------------------------------------------------- gradients, opcheck
@pytest.mark.parametrize('channels', [1, 5, 16])
def test_gradcheck(channels):
    x, weight, bias = (t.requires_grad_() for t in problem(7, channels, torch.float64, seed=3))
    assert torch.autograd.gradcheck(lambda *a: layer_norm_rows(*a, eps=1e-3), (x, weight, bias))


def test_gradients_match_torch_layer_norm():
    x, weight, bias = (t.requires_grad_() for t in problem(50, 24, torch.float64, seed=4))
    grad = torch.randn(50, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ours = torch.autograd.grad(layer_norm_rows(x, weight, bias), (x, weight, bias), grad)
    theirs = torch.autograd.grad(F.layer_norm(x, (24,), weight, bias), (x, weight, bias), grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_opcheck(dtype):
    x, weight, bias = (t.requires_grad_() for t in problem(9, 16, dtype, seed=2))
    torch.library.opcheck(torch.ops.fsdlite.layer_norm_rows.default, (x, weight, bias, 1e-5))


# ------------------------------------------------------------------------------------- invalid inputs
X, W, B = problem(4, 8)


@pytest.mark.parametrize('args, error, match', [
    (([[1.0]], W, B), TypeError, 'x must be a torch.Tensor'),
    ((X.half(), W, B), TypeError, 'x must have one of the dtypes'),
    ((X.long(), W, B), TypeError, 'x must have one of the dtypes'),
    ((X[0], W, B), ValueError, 'x must be 2-D'),
    ((X[:, :0], W[:0], B[:0]), ValueError, 'x must have at least one channel'),
    ((X, W.double(), B), TypeError, 'weight must have dtype torch.float32'),
    ((X, W, B[:4]), ValueError, r'bias.shape\[0\] must be 8 \(x.shape\[1\] \(C\)\)'),
    ((X, W[None], B), ValueError, 'weight must be 1-D'),
    ((X, W, B, 0.0), ValueError, 'eps must be finite and > 0'),
    ((X, W, B, float('nan')), ValueError, 'eps must be finite and > 0'),
    ((X, W, B, 'small'), TypeError, 'eps must be a number'),
])
def test_invalid_inputs_raise(args, error, match):
    with pytest.raises(error, match=match):
        layer_norm_rows(*args)


@pytest.mark.parametrize('args, match', [
    ((X.half(), W.half(), B.half(), 1e-5), 'x must be float32 or float64'),
    ((X[0], W, B, 1e-5), 'x must be 2-D'),
    ((X[:, :0], W[:0], B[:0], 1e-5), 'x must have at least one channel'),
    ((X, W.double(), B, 1e-5), 'weight must have dtype Float'),
    ((X, W, B[:4], 1e-5), r'bias.size\(0\) must equal x.size\(1\) \(C\)'),
    ((X, W, B, -1.0), 'eps must be finite and > 0'),
])
def test_kernel_validates_before_running(args, match):
    """The C++ op raises (never crashes) when called directly with bad arguments."""
    with pytest.raises(RuntimeError, match=match):
        torch.ops.fsdlite.layer_norm_rows(*args)


# ----------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize('channels', [1, 8, 32, 100, 300])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_cuda_matches_cpu(channels, dtype):
    x, weight, bias = problem(1000, channels, dtype, seed=channels)
    gpu = layer_norm_rows(x.cuda(), weight.cuda(), bias.cuda())
    torch.testing.assert_close(gpu.cpu(), layer_norm_rows(x, weight, bias), **tolerance(dtype))


@pytest.mark.cuda
def test_cuda_gradcheck_opcheck_and_device_mismatch():
    x, weight, bias = (t.cuda().requires_grad_() for t in problem(7, 5, torch.float64, seed=3))
    assert torch.autograd.gradcheck(lambda *a: layer_norm_rows(*a, eps=1e-3), (x, weight, bias))
    torch.library.opcheck(torch.ops.fsdlite.layer_norm_rows.default, (x, weight, bias, 1e-5))
    with pytest.raises(ValueError, match='one device'):
        layer_norm_rows(X.cuda(), W, B)


# --------------------------------------------------------------------------------------- RowLayerNorm
def test_row_layer_norm_is_built_for_ln_configs_and_matches_layer_norm():
    from fsdlite.models.layers.norm_act import RowLayerNorm, build_norm
    norm = build_norm(dict(type='LN', eps=1e-4), 24)
    assert type(norm) is RowLayerNorm and isinstance(norm, torch.nn.LayerNorm) and norm.eps == 1e-4
    reference = torch.nn.LayerNorm(24, eps=1e-4)
    with torch.no_grad():
        norm.weight.normal_(), norm.bias.normal_()
    reference.load_state_dict(norm.state_dict(), strict=True)
    x = torch.randn(300, 24)
    with torch.inference_mode():
        torch.testing.assert_close(norm(x), reference(x), atol=2e-5, rtol=1e-5)
    norm(x.requires_grad_()).square().sum().backward()  # training: torch's path
    assert norm.weight.grad is not None and x.grad is not None


def test_row_layer_norm_takes_the_op_only_where_it_applies(monkeypatch):
    import fsdlite.models.layers.norm_act as norm_act
    from fsdlite.models.layers.norm_act import build_norm
    calls = []
    real = norm_act.layer_norm_rows

    def spy(x, *args):
        calls.append(tuple(x.shape))
        return real(x, *args)

    monkeypatch.setattr(norm_act, 'layer_norm_rows', spy)
    norm = build_norm(dict(type='LN'), 16)
    norm(torch.randn(10, 16))  # autograd on: torch's path
    with torch.no_grad():
        norm(torch.randn(10, 16))
        with torch.inference_mode():
            norm(torch.randn(11, 16))
        assert calls == [(10, 16), (11, 16)]
        norm(torch.randn(2, 10, 16))  # 3-D: torch's path
        build_norm(dict(type='LN', elementwise_affine=False), 16)(torch.randn(10, 16))  # no parameters
        monkeypatch.setattr(norm_act, 'is_exporting', lambda: True)
        torch.testing.assert_close(norm(torch.ones(3, 16)), norm.bias.expand(3, 16))  # exporting
    assert calls == [(10, 16), (11, 16)]
