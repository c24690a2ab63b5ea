"""Tests of the fused kpconv op against its pure-torch reference (the einsum formulation).

Neighbour lists here are random indices in [0, N] (N = shadow), so duplicates and shadow padding
occur naturally; the op does not depend on how neighbourhoods were found.
"""
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _kp_helpers import (assert_cuda_matches_cpu, assert_matches, kp_problem, outputs_and_grads, require_grad,
                         s3dis_neighborhoods)
from fsdlite.ops import kpconv
from fsdlite.ops.kpconv import AGGREGATIONS, INFLUENCES
from fsdlite.ops.kpconv.reference import kpconv_reference

GRAD_KEYS = ('features', 'kernel_points', 'weights', 'modulations')


def problem(m=7, n=9, h=5, k=4, c1=3, c2=2, dtype=torch.float64, per_query=False, mod=False, seed=0,
            shadow=0.2, requires_grad=True):
    """Random kpconv arguments: points in the unit cube, random neighbour slots, some shadows."""
    g, args = kp_problem(m, n, h, k, c1, dtype, per_query, seed, shadow)
    args.update(weights=torch.randn(k, c1, c2, generator=g, dtype=dtype),
                modulations=torch.rand(m, k, generator=g, dtype=dtype) if mod else None)
    return require_grad(args, GRAD_KEYS) if requires_grad else args


def assert_matches_reference(args, **params):
    assert_matches(kpconv, kpconv_reference, args, GRAD_KEYS, **params)


@pytest.mark.parametrize('influence,aggregation,per_query,mod',
                         list(itertools.product(INFLUENCES, AGGREGATIONS, [False, True], [False, True])))
def test_matches_reference(influence, aggregation, per_query, mod):
    args = problem(per_query=per_query, mod=mod, seed=2 * INFLUENCES.index(influence) + AGGREGATIONS.index(aggregation))
    assert_matches_reference(args, sigma=0.6, influence=influence, aggregation=aggregation)


@pytest.mark.parametrize('influence,aggregation', list(itertools.product(INFLUENCES, AGGREGATIONS)))
def test_gradcheck_float64(influence, aggregation):
    args = problem(m=5, n=6, h=4, k=3, c1=2, c2=2, per_query=True, mod=True, seed=3)

    def fn(x, kp, w, m):
        return kpconv(args['q_pts'], args['s_pts'], args['neighbors'], x, kp, w, m, sigma=0.8,
                      influence=influence, aggregation=aggregation)

    assert torch.autograd.gradcheck(fn, tuple(args[k] for k in GRAD_KEYS))


def test_shared_kernel_points_gradcheck():
    args = problem(m=5, n=6, h=4, k=3, c1=2, c2=2, seed=4)
    fn = lambda kp: kpconv(**{**args, 'kernel_points': kp}, sigma=0.8, influence='gaussian')  # noqa: E731
    assert torch.autograd.gradcheck(fn, (args['kernel_points'],))


def test_float32_several_chunks():
    # K * C1 = 2400 values per query: the CPU driver processes 1500 queries in 2 chunks.
    args = problem(m=1500, n=600, h=12, k=15, c1=160, c2=8, dtype=torch.float32, per_query=True, mod=True, seed=5)
    assert_matches_reference(args, atol=2e-4, rtol=2e-4, sigma=0.5, influence='linear', aggregation='sum')


@pytest.mark.parametrize('per_query,mod', [(False, False), (True, True)])
def test_opcheck(per_query, mod):
    args = problem(m=6, n=7, h=4, k=3, c1=3, c2=2, per_query=per_query, mod=mod, seed=6)
    torch.library.opcheck(torch.ops.fsdlite.kpconv.default,
                          tuple(args.values()) + (0.7, 'linear', 'sum'))
    torch.library.opcheck(torch.ops.fsdlite.kpconv.default,
                          tuple(args.values()) + (0.7, 'gaussian', 'nearest'))


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 6), n=st.integers(0, 6), h=st.integers(0, 4), k=st.integers(1, 4), c1=st.integers(1, 3),
       c2=st.integers(1, 3), shadow=st.sampled_from([0.0, 0.3, 1.0]), influence=st.sampled_from(INFLUENCES),
       aggregation=st.sampled_from(AGGREGATIONS), per_query=st.booleans(), mod=st.booleans(),
       seed=st.integers(0, 2**16))
def test_property_matches_reference(m, n, h, k, c1, c2, shadow, influence, aggregation, per_query, mod, seed):
    args = problem(m, n, h, k, c1, c2, per_query=per_query, mod=mod, seed=seed, shadow=shadow)
    assert_matches_reference(args, sigma=0.7, influence=influence, aggregation=aggregation)


def test_nearest_tie_goes_to_first_kernel_point():
    args = problem(m=4, n=5, h=3, k=2, c1=2, c2=3, seed=7, shadow=0.0)
    kp = torch.zeros(2, 3, dtype=torch.float64)  # two identical kernel points: every neighbour ties
    w = args['weights'].detach().clone()
    y = kpconv(**{**args, 'kernel_points': kp, 'weights': w}, sigma=2.0, influence='linear', aggregation='nearest')
    first_only = w.clone()
    first_only[1] = 0
    y_first = kpconv(**{**args, 'kernel_points': kp, 'weights': first_only}, sigma=2.0, influence='linear',
                     aggregation='nearest')
    torch.testing.assert_close(y, y_first)
    assert y.abs().sum() > 0


def test_shadow_neighbors_contribute_nothing():
    args = problem(m=3, n=4, h=3, seed=8)
    args['neighbors'] = torch.full((3, 3), 4)
    y, (gx, gkp, gw) = outputs_and_grads(kpconv, args, GRAD_KEYS, sigma=0.5)
    assert torch.count_nonzero(y) == 0 and torch.count_nonzero(gx) == 0 and torch.count_nonzero(gw) == 0


def test_duplicate_neighbor_counts_twice():
    args = problem(m=3, n=4, h=2, seed=9, requires_grad=False)
    j = torch.tensor([[1, 1], [2, 2], [0, 0]])
    once = torch.where(torch.arange(2) == 0, j, torch.full_like(j, 4))
    y_twice = kpconv(**{**args, 'neighbors': j}, sigma=1.5, influence='gaussian')
    y_once = kpconv(**{**args, 'neighbors': once}, sigma=1.5, influence='gaussian')
    torch.testing.assert_close(y_twice, 2 * y_once)


def test_int32_neighbors_accepted():
    args = problem(requires_grad=False)
    y64 = kpconv(**args, sigma=0.6)
    y32 = kpconv(**{**args, 'neighbors': args['neighbors'].int()}, sigma=0.6)
    torch.testing.assert_close(y32, y64)


def test_backward_saves_only_the_inputs():
    """The fused op keeps no (M, H, C1) / (M, K, C1) tensor for backward: only its inputs."""
    args = problem(m=50, n=60, h=8, k=5, c1=16, c2=4, seed=10)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        kpconv(**args, sigma=0.6)
    input_ptrs = {t.data_ptr() for t in args.values() if t is not None}
    assert saved and all(t.data_ptr() in input_ptrs for t in saved)
    naive_saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: naive_saved.append(t) or t, lambda t: t):
        kpconv_reference(**args, sigma=0.6)
    assert max(t.numel() for t in naive_saved) >= 50 * 5 * 16  # the reference keeps (M, K, C1)


def test_real_s3dis_neighborhoods(shared_data):
    """Fused vs reference on real geometry: 1,500 S3DIS points, radius 0.6, H = 24 (see s3dis_neighborhoods)."""
    pts, feats, nb = s3dis_neighborhoods(shared_data, 1500, radius=0.6, h=24, seed=0)
    assert (nb < len(pts)).sum(1).float().mean() > 4  # real neighbourhoods, not all shadows
    g = torch.Generator().manual_seed(0)
    args = dict(q_pts=pts, s_pts=pts, neighbors=nb, features=feats.requires_grad_(True),
                kernel_points=(0.25 * torch.randn(15, 3, generator=g)).requires_grad_(True),
                weights=torch.randn(15, 3, 8, generator=g).requires_grad_(True), modulations=None)
    for aggregation in AGGREGATIONS:
        assert_matches_reference(args, atol=1e-4, rtol=1e-4, sigma=0.3, influence='linear', aggregation=aggregation)


BAD_CASES = [
    (dict(features=torch.zeros(9, 3, dtype=torch.int64)), TypeError, 'features'),
    (dict(q_pts=torch.zeros(7, 2, dtype=torch.float64)), ValueError, 'q_pts'),
    (dict(s_pts=torch.zeros(8, 3, dtype=torch.float64)), ValueError, 's_pts'),
    (dict(neighbors=torch.zeros(7, 5)), TypeError, 'neighbors'),
    (dict(neighbors=torch.full((7, 5), 10)), RuntimeError, r'neighbors \(N = .*\) contains 10'),  # checked in C++
    (dict(neighbors=torch.full((7, 5), -1)), RuntimeError, r'neighbors \(N = .*\) contains -1'),
    (dict(neighbors=torch.zeros(6, 5, dtype=torch.long)), ValueError, 'neighbors'),
    (dict(kernel_points=torch.zeros(4, 2, dtype=torch.float64)), ValueError, 'kernel_points'),
    (dict(kernel_points=torch.zeros(3, 4, 3, dtype=torch.float64)), ValueError, 'kernel_points'),
    (dict(kernel_points=torch.zeros(4, 3, dtype=torch.float32)), TypeError, 'kernel_points'),
    (dict(weights=torch.zeros(5, 3, 2, dtype=torch.float64)), ValueError, 'weights'),
    (dict(weights=torch.zeros(4, 2, 2, dtype=torch.float64)), ValueError, 'weights'),
    (dict(modulations=torch.zeros(7, 3, dtype=torch.float64)), ValueError, 'modulations'),
    (dict(influence='cubic'), ValueError, 'influence'),
    (dict(aggregation='max'), ValueError, 'aggregation'),
    (dict(sigma=0.0), ValueError, 'sigma'),
    (dict(sigma=float('nan')), ValueError, 'sigma'),
]


@pytest.mark.parametrize('change,error,match', BAD_CASES)
def test_invalid_arguments_raise(change, error, match):
    args = problem(requires_grad=False)
    params = dict(sigma=0.5, influence='linear', aggregation='sum')
    for key in ('influence', 'aggregation', 'sigma'):
        if key in change:
            params[key] = change.pop(key)
    with pytest.raises(error, match=match):
        kpconv(**{**args, **change}, **params)


@pytest.mark.parametrize('change,match', [
    (dict(neighbors=torch.full((7, 5), 10)), 'neighbors'),
    (dict(neighbors=torch.full((7, 5), -3)), 'neighbors'),
    (dict(weights=torch.zeros(4, 3, 2, dtype=torch.float32)), 'weights'),
    (dict(features=torch.zeros(9, 3, dtype=torch.float16)), 'features'),
])
def test_direct_op_call_validates_in_cpp(change, match):
    """Calling torch.ops.fsdlite.kpconv directly never crashes: the C++ side raises first."""
    args = {**problem(requires_grad=False), **change}
    with pytest.raises(RuntimeError, match=match):
        torch.ops.fsdlite.kpconv(*args.values(), 0.5, 'linear', 'sum')
    grad = torch.zeros(7, 2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match=match):
        torch.ops.fsdlite.kpconv_backward(grad, *args.values(), 0.5, 'linear', 'sum', [True, True, True, False])


@pytest.mark.cuda
@pytest.mark.parametrize('influence,aggregation', list(itertools.product(INFLUENCES, AGGREGATIONS)))
def test_cuda_matches_cpu(influence, aggregation):
    args = problem(m=300, n=200, h=10, k=6, c1=12, c2=5, dtype=torch.float32, per_query=True, mod=True, seed=11)
    assert_cuda_matches_cpu(kpconv, args, GRAD_KEYS, sigma=0.6, influence=influence, aggregation=aggregation)


@pytest.mark.parametrize('name', ['q_pts', 's_pts', 'kernel_points'])
def test_nan_positions_are_refused(name):
    """As every geometric op (knn, radius_neighbors, ...): NaN positions used to give NaN output rows."""
    args = problem(requires_grad=False)
    bad = args[name].clone()
    bad.view(-1)[0] = float('nan')
    with pytest.raises(RuntimeError, match=f'kpconv: {name} must contain only finite values, got nan'):  # in C++
        kpconv(**{**args, name: bad}, sigma=0.5, influence='linear', aggregation='sum')
