"""knn_aggregate: reference equality, hand values, gradients, opcheck, properties, bad inputs."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.ops import KnnAggregate, knn_aggregate
from fsdlite.ops.knn_aggregate.reference import knn_aggregate_reference


def _random_case(nq, ns, k, width, dtype=torch.float64, pad_fraction=0.2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(ns, width, generator=gen, dtype=dtype)
    index = torch.randint(0, max(ns, 1), (nq, k), generator=gen)
    index[torch.rand(nq, k, generator=gen) < pad_fraction] = ns
    weights = torch.rand(nq, k, generator=gen, dtype=dtype)
    return features, index, weights


def _assert_matches_reference(features, index, weights, atol=1e-12):
    out = knn_aggregate(features, index, weights)
    mean, maximum, argmax = knn_aggregate_reference(features, index, weights)
    torch.testing.assert_close(out.mean, mean, atol=atol, rtol=0, equal_nan=True)
    torch.testing.assert_close(out.max, maximum, atol=atol, rtol=0)
    torch.testing.assert_close(out.argmax, argmax)


def test_hand_computed_values():
    features = torch.tensor([[1.0, -2.0], [3.0, 4.0], [0.5, 0.0]])
    index = torch.tensor([[0, 1, 3], [2, 2, 3], [3, 3, 3]])  # 3 = padding (Ns)
    weights = torch.tensor([[1.0, 0.5, 9.0], [2.0, 1.0, 9.0], [1.0, 1.0, 1.0]])
    out = knn_aggregate(features, index, weights)
    assert isinstance(out, KnnAggregate)
    # row 0: values [1, -2] and [1.5, 2]; row 1: [1, 0] and [0.5, 0]; row 2: no valid neighbour
    torch.testing.assert_close(out.mean, torch.tensor([[1.25, 0.0], [0.75, 0.0], [0.0, 0.0]]))
    torch.testing.assert_close(out.max, torch.tensor([[1.5, 2.0], [1.0, 0.0], [0.0, 0.0]]))
    assert out.argmax.tolist() == [[1, 1], [0, 0], [3, 3]]  # tie in row 1, col 1 -> first slot


@pytest.mark.parametrize('dtype,atol', [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_matches_reference(dtype, atol):
    _assert_matches_reference(*_random_case(300, 200, 25, 22, dtype=dtype), atol=atol)


def test_gradcheck_float64():
    features, index, weights = _random_case(12, 9, 4, 3, pad_fraction=0.25, seed=1)
    features.requires_grad_(True)
    weights.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda f, w: tuple(knn_aggregate(f, index, w)[:2]), (features, weights))


def test_gradients_match_reference_autograd():
    features, index, weights = _random_case(200, 150, 8, 6, seed=2)
    grads = []
    for fn in (lambda f, w: knn_aggregate(f, index, w)[:2], lambda f, w: knn_aggregate_reference(f, index, w)[:2]):
        f, w = features.clone().requires_grad_(True), weights.clone().requires_grad_(True)
        mean, maximum = fn(f, w)
        (mean.sin().sum() + (maximum * torch.linspace(-1, 2, maximum.shape[1])).sum()).backward()
        grads.append((f.grad, w.grad))
    for mine, ref in zip(*grads):
        torch.testing.assert_close(mine, ref, atol=1e-12, rtol=0)


def test_only_one_input_requires_grad():
    features, index, weights = _random_case(20, 10, 3, 4, seed=3)
    f = features.clone().requires_grad_(True)
    knn_aggregate(f, index, weights).max.sum().backward()
    f_ref = features.clone().requires_grad_(True)
    knn_aggregate_reference(f_ref, index, weights)[1].sum().backward()
    torch.testing.assert_close(f.grad, f_ref.grad)
    w = weights.clone().requires_grad_(True)
    knn_aggregate(features, index, w).mean.sum().backward()
    w_ref = weights.clone().requires_grad_(True)
    knn_aggregate_reference(features, index, w_ref)[0].sum().backward()
    torch.testing.assert_close(w.grad, w_ref.grad)


def test_backward_saves_no_k_by_f_tensor():
    nq, ns, k, width = 64, 40, 7, 5
    features, index, weights = _random_case(nq, ns, k, width, dtype=torch.float32)
    features.requires_grad_(True)
    weights.requires_grad_(True)
    shapes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
        out = knn_aggregate(features, index, weights)
    assert shapes and all(s != (nq, k, width) and len(s) <= 2 for s in shapes), shapes
    (out.mean.sum() + out.max.sum()).backward()


def test_multithreaded_kernels_are_deterministic():
    features, index, weights = _random_case(3000, 2000, 9, 6, dtype=torch.float32, seed=8)
    results = []
    previous = torch.get_num_threads()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        try:
            f, w = features.clone().requires_grad_(True), weights.clone().requires_grad_(True)
            out = knn_aggregate(f, index, w)
            (out.mean.sum() + (out.max * 1.5).sum()).backward()
            results.append([out.mean, out.max, out.argmax, f.grad, w.grad])
        finally:
            torch.set_num_threads(previous)
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_opcheck():
    features, index, weights = _random_case(10, 8, 3, 4, seed=4)
    features.requires_grad_(True)
    weights.requires_grad_(True)
    torch.library.opcheck(torch.ops.fsdlite.knn_aggregate.default, (features, index, weights))
    mean, maximum, argmax = torch.ops.fsdlite.knn_aggregate(features.detach(), index, weights.detach())
    for need in ((True, True), (True, False), (False, True)):
        torch.library.opcheck(torch.ops.fsdlite.knn_aggregate_backward.default,
                              (torch.randn_like(mean), torch.randn_like(maximum), features.detach(), index,
                               weights.detach(), argmax, *need))


def test_nan_never_wins_the_max_but_propagates_to_the_mean():
    features = torch.tensor([[float('nan')], [2.0], [-1.0]])
    out = knn_aggregate(features, torch.tensor([[0, 1, 2], [0, 0, 0]]), torch.ones(2, 3))
    assert torch.isnan(out.mean).all()
    assert out.max.tolist() == [[2.0], [0.0]] and out.argmax.tolist() == [[1], [3]]


def test_minus_infinity_can_win_the_max():
    features = torch.tensor([[float('nan'), 1.0], [float('-inf'), float('-inf')], [float('-inf'), 3.0]])
    out = knn_aggregate(features, torch.tensor([[0, 1, 2]]), torch.ones(1, 3))
    assert out.max.tolist() == [[float('-inf'), 3.0]] and out.argmax.tolist() == [[1, 2]]
    _assert_matches_reference(features.double(), torch.tensor([[0, 1, 2]]), torch.ones(1, 3).double())


def test_int32_index_is_accepted():
    features, index, weights = _random_case(30, 20, 4, 3, seed=5)
    a = knn_aggregate(features, index.int(), weights)
    b = knn_aggregate(features, index, weights)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)


def test_real_lidar_neighbourhoods(shared_data):
    points = np.fromfile(shared_data / 'kitti_object_000008' / '000008.bin', np.float32).reshape(-1, 4)[::10]
    pts = torch.from_numpy(points)
    sqdist, index = torch.cdist(pts[:, :3], pts[:, :3]).square().topk(16, largest=False)
    weights = torch.exp(-0.5 * sqdist)
    features = torch.cat([pts, pts[:, :3].norm(dim=1, keepdim=True)], 1)
    _assert_matches_reference(features, index, weights, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(nq=st.integers(0, 6), ns=st.integers(0, 6), k=st.integers(0, 4), width=st.integers(0, 3),
       seed=st.integers(0, 2**16), ties=st.booleans())
def test_property_matches_reference(nq, ns, k, width, seed, ties):
    gen = torch.Generator().manual_seed(seed)
    features = torch.randint(-2, 3, (ns, width), generator=gen).double() if ties else \
        torch.randn(ns, width, generator=gen, dtype=torch.float64)
    index = torch.randint(0, ns + 1, (nq, k), generator=gen)   # duplicates and padding (== ns) included
    weights = torch.randint(0, 3, (nq, k), generator=gen).double() if ties else \
        torch.rand(nq, k, generator=gen, dtype=torch.float64)
    _assert_matches_reference(features, index, weights)
    f, w = features.clone().requires_grad_(True), weights.clone().requires_grad_(True)
    out = knn_aggregate(f, index, w)
    (out.mean.sum() + out.max.sum()).backward()
    f_ref, w_ref = features.clone().requires_grad_(True), weights.clone().requires_grad_(True)
    mean, maximum, _ = knn_aggregate_reference(f_ref, index, w_ref)
    (mean.sum() + maximum.sum()).backward()
    for mine, ref in ((f.grad, f_ref.grad), (w.grad, w_ref.grad)):
        torch.testing.assert_close(mine, torch.zeros_like(mine) if ref is None else ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize('make,error,match', [
    (lambda f, i, w: (f.long(), i, w.long()), TypeError, 'features must be a floating-point'),
    (lambda f, i, w: (f[0], i, w), ValueError, 'features must be 2-D'),
    (lambda f, i, w: (f, i.float(), w), TypeError, 'index must have one of the dtypes'),
    (lambda f, i, w: (f, i[:, :2], w), ValueError, r'weights.shape\[1\] must be 2'),
    (lambda f, i, w: (f, i, w[:3]), ValueError, r'weights.shape\[0\] must be 5'),
    (lambda f, i, w: (f, i, w.float()), TypeError, 'weights must have dtype torch.float64'),
    # index values: checked once, by the C++ op
    (lambda f, i, w: (f, i - 1, w), RuntimeError, r'index contains -1, expected values in \[0, 5\)'),
    (lambda f, i, w: (f, i + 5, w), RuntimeError, r'index contains \d+, expected values in \[0, 5\)'),
    (lambda f, i, w: (f.tolist(), i, w), TypeError, 'features must be a torch.Tensor'),
])
def test_invalid_inputs_raise(make, error, match):
    features, index, weights = _random_case(5, 4, 3, 2)
    with pytest.raises(error, match=match):
        knn_aggregate(*make(features, index, weights))


def test_kernel_validates_without_the_python_wrapper():
    features, index, weights = _random_case(5, 4, 3, 2)
    with pytest.raises(RuntimeError, match=r'index contains [-0-9]+, expected values in \[0, 5\)'):
        torch.ops.fsdlite.knn_aggregate(features, index + 10, weights)
    with pytest.raises(RuntimeError, match='weights must have dtype'):
        torch.ops.fsdlite.knn_aggregate(features, index, weights.float())
    mean, maximum, argmax = torch.ops.fsdlite.knn_aggregate(features, index, weights)
    with pytest.raises(RuntimeError, match=r'argmax contains [-0-9]+, expected values in \[0, 4\)'):
        torch.ops.fsdlite.knn_aggregate_backward(mean, maximum, features, index, weights, argmax + 7, True, True)
    with pytest.raises(RuntimeError, match='grad_max.size'):
        torch.ops.fsdlite.knn_aggregate_backward(mean, maximum[:2], features, index, weights, argmax, True, True)


def test_backward_rejects_argmax_on_a_padded_slot():
    # argmax pointing at a padded slot (index == Ns) made the kernel read and write features row Ns: heap corruption.
    features, index, weights = _random_case(6, 5, 3, 2)
    index[:, 1] = 5
    argmax = torch.ones(6, 2, dtype=torch.long)
    grad = torch.ones(6, 2, dtype=features.dtype)
    with pytest.raises(RuntimeError, match=r'argmax\[0, 0\] = 1 points at a padded slot \(index\[0, 1\] = 5'):
        torch.ops.fsdlite.knn_aggregate_backward(grad, grad, features, index, weights, argmax, True, True)
    argmax.fill_(3)  # k: no winner anywhere, valid
    gx, gw = torch.ops.fsdlite.knn_aggregate_backward(grad, grad, features, index, weights, argmax, True, True)
    assert gx.shape == features.shape and gw.shape == weights.shape


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_cuda_matches_cpu(dtype):
    features, index, weights = _random_case(500, 300, 25, 22, dtype=dtype, seed=6)
    cpu = [t.clone().requires_grad_(True) for t in (features, weights)]
    gpu = [t.cuda().requires_grad_(True) for t in (features, weights)]
    outs = []
    for (f, w) in (cpu, gpu):
        out = knn_aggregate(f, index.to(f.device), w)
        (out.mean.square().sum() + out.max.sum()).backward()
        outs.append([out.mean, out.max, out.argmax, f.grad, w.grad])
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    for a, b in zip(*outs):
        torch.testing.assert_close(b.cpu(), a.detach(), atol=tol, rtol=tol)


@pytest.mark.cuda
def test_cuda_opcheck_and_padding():
    features, index, weights = _random_case(40, 30, 5, 3, seed=7)
    args = (features.cuda().requires_grad_(True), index.cuda(), weights.cuda().requires_grad_(True))
    torch.library.opcheck(torch.ops.fsdlite.knn_aggregate.default, args)
    _assert_matches_reference(*[a.detach() for a in args])
