"""Tests of the fused kp_aggregate / neighbor_aggregate ops against their pure-torch references."""
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _kp_helpers import assert_cuda_matches_cpu, assert_matches, kp_problem, require_grad, s3dis_neighborhoods
from fsdlite.ops import kp_aggregate, neighbor_aggregate
from fsdlite.ops.kp_aggregate.reference import kp_aggregate_reference, neighbor_aggregate_reference
from fsdlite.ops.kpconv import AGGREGATIONS, INFLUENCES

GRAD_KEYS = ('features', 'depthwise', 'gen_weights')


def problem(m=6, n=8, h=5, k=3, c=4, w=2, dtype=torch.float64, depthwise=True, gen=True, per_query=False, seed=0,
            shadow=0.2, requires_grad=True):
    """Random kp_aggregate arguments (random neighbour slots in [0, N], N = shadow)."""
    g, args = kp_problem(m, n, h, k, c, dtype, per_query, seed, shadow)
    args.update(depthwise=torch.randn(k, c, generator=g, dtype=dtype) if depthwise else None,
                gen_weights=torch.randn(m, k, w, generator=g, dtype=dtype) if gen else None)
    return require_grad(args, GRAD_KEYS) if requires_grad else args


@pytest.mark.parametrize('influence,aggregation,depthwise,gen',
                         list(itertools.product(INFLUENCES, AGGREGATIONS, [False, True], [False, True])))
def test_matches_reference(influence, aggregation, depthwise, gen):
    args = problem(depthwise=depthwise, gen=gen, seed=2 * INFLUENCES.index(influence) + depthwise)
    assert_matches(kp_aggregate, kp_aggregate_reference, args, GRAD_KEYS, sigma=0.7, influence=influence,
                   aggregation=aggregation)


@pytest.mark.parametrize('influence,aggregation', list(itertools.product(INFLUENCES, AGGREGATIONS)))
def test_gradcheck_float64(influence, aggregation):
    args = problem(m=4, n=5, h=4, k=3, c=4, w=2, per_query=True, seed=3)

    def fn(x, d, a):
        return kp_aggregate(args['q_pts'], args['s_pts'], args['neighbors'], x, args['kernel_points'], d, a,
                            sigma=0.8, influence=influence, aggregation=aggregation)

    assert torch.autograd.gradcheck(fn, tuple(args[k] for k in GRAD_KEYS))


def test_group_layout_channel_c_uses_weight_c_div_g():
    args = problem(m=3, n=5, h=4, k=2, c=4, w=2, depthwise=False, seed=4, shadow=0.0, requires_grad=False)
    a = torch.zeros(3, 2, 2, dtype=torch.float64)
    a[..., 0] = 1.0  # weight 0 drives channels 0 and 1, weight 1 (zero) channels 2 and 3
    y = kp_aggregate(**{**args, 'gen_weights': a}, sigma=5.0, influence='constant', aggregation='sum')
    assert torch.count_nonzero(y[:, 2:]) == 0 and torch.count_nonzero(y[:, :2]) > 0


def test_float32_several_chunks():
    args = problem(m=1200, n=500, h=16, k=15, c=192, w=12, dtype=torch.float32, seed=5)
    assert_matches(kp_aggregate, kp_aggregate_reference, args, GRAD_KEYS, atol=2e-4, rtol=2e-4, sigma=0.5,
                   influence='linear', aggregation='nearest')


def test_opcheck():
    for depthwise, gen, per_query in [(True, True, False), (False, True, True), (True, False, False)]:
        args = problem(m=5, n=6, h=4, k=3, c=4, w=2, depthwise=depthwise, gen=gen, per_query=per_query, seed=6)
        torch.library.opcheck(torch.ops.fsdlite.kp_aggregate.default,
                              tuple(args.values()) + (0.7, 'linear', 'nearest'))
    nb = problem(seed=7)
    weights = torch.randn(6, 5, 2, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.fsdlite.neighbor_aggregate.default, (nb['neighbors'], nb['features'], weights))


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 5), n=st.integers(0, 6), h=st.integers(0, 4), k=st.integers(1, 4),
       cw=st.sampled_from([(1, 1), (2, 1), (4, 2), (6, 3)]), shadow=st.sampled_from([0.0, 0.3, 1.0]),
       influence=st.sampled_from(INFLUENCES), aggregation=st.sampled_from(AGGREGATIONS),
       depthwise=st.booleans(), gen=st.booleans(), per_query=st.booleans(), seed=st.integers(0, 2**16))
def test_property_matches_reference(m, n, h, k, cw, shadow, influence, aggregation, depthwise, gen, per_query, seed):
    args = problem(m, n, h, k, cw[0], cw[1], depthwise=depthwise, gen=gen, per_query=per_query, seed=seed,
                   shadow=shadow)
    assert_matches(kp_aggregate, kp_aggregate_reference, args, GRAD_KEYS, sigma=0.7, influence=influence,
                   aggregation=aggregation)


def neighbor_problem(m=6, n=8, h=5, c=4, w=2, seed=0, shadow=0.2, dtype=torch.float64):
    args = problem(m, n, h, 1, c, w, dtype=dtype, seed=seed, shadow=shadow, depthwise=False, gen=False)
    g = torch.Generator().manual_seed(seed + 1)
    return dict(neighbors=args['neighbors'], features=args['features'],
                weights=torch.randn(m, h, w, generator=g, dtype=dtype).requires_grad_(True))


@settings(max_examples=30, deadline=None)
@given(m=st.integers(0, 5), n=st.integers(0, 6), h=st.integers(0, 4), cw=st.sampled_from([(1, 1), (4, 2), (6, 3)]),
       shadow=st.sampled_from([0.0, 0.3, 1.0]), seed=st.integers(0, 2**16))
def test_neighbor_aggregate_matches_reference(m, n, h, cw, shadow, seed):
    args = neighbor_problem(m, n, h, cw[0], cw[1], seed=seed, shadow=shadow)
    assert_matches(neighbor_aggregate, neighbor_aggregate_reference, args, keys=('features', 'weights'))


def test_neighbor_aggregate_gradcheck_and_chunks():
    args = neighbor_problem(m=4, n=5, h=3, c=4, w=2, seed=8)
    assert torch.autograd.gradcheck(lambda x, a: neighbor_aggregate(args['neighbors'], x, a),
                                    (args['features'], args['weights']))
    big = neighbor_problem(m=3000, n=900, h=24, c=64, w=8, seed=9, dtype=torch.float32)  # > 1 chunk
    assert_matches(neighbor_aggregate, neighbor_aggregate_reference, big, keys=('features', 'weights'),
                   atol=1e-4, rtol=1e-4)


def test_real_s3dis_neighborhoods(shared_data):
    """Fused vs reference on real geometry: 1,200 S3DIS points, radius 0.6, H = 20 (see s3dis_neighborhoods)."""
    pts, rgb, nb = s3dis_neighborhoods(shared_data, 1200, radius=0.6, h=20, seed=1)
    g = torch.Generator().manual_seed(0)
    feats = rgb.repeat(1, 4)
    args = dict(q_pts=pts, s_pts=pts, neighbors=nb, features=feats.requires_grad_(True),
                kernel_points=0.25 * torch.randn(15, 3, generator=g),
                depthwise=torch.randn(15, 12, generator=g).requires_grad_(True),
                gen_weights=torch.rand(1200, 15, 3, generator=g).requires_grad_(True))
    assert_matches(kp_aggregate, kp_aggregate_reference, args, GRAD_KEYS, atol=1e-4, rtol=1e-4, sigma=0.3,
                   influence='linear', aggregation='nearest')


BAD_CASES = [
    (dict(features=torch.zeros(8, 4, dtype=torch.int32)), TypeError, 'features'),
    (dict(neighbors=torch.full((6, 5), 9)), RuntimeError, r'neighbors \(N = .*\) contains 9'),  # checked in C++
    (dict(neighbors=torch.full((6, 5), -1)), RuntimeError, r'neighbors \(N = .*\) contains -1'),
    (dict(depthwise=torch.zeros(2, 4, dtype=torch.float64)), ValueError, 'depthwise'),
    (dict(depthwise=torch.zeros(3, 4, dtype=torch.float32)), TypeError, 'depthwise'),
    (dict(gen_weights=torch.zeros(6, 3, 3, dtype=torch.float64)), ValueError, 'gen_weights'),
    (dict(gen_weights=torch.zeros(5, 3, 2, dtype=torch.float64)), ValueError, 'gen_weights'),
    (dict(kernel_points=torch.zeros(3, 3, 3, dtype=torch.float64)), ValueError, 'kernel_points'),
]


@pytest.mark.parametrize('change,error,match', BAD_CASES)
def test_invalid_arguments_raise(change, error, match):
    args = {**problem(requires_grad=False), **change}
    with pytest.raises(error, match=match):
        kp_aggregate(**args, sigma=0.5)


def test_invalid_influence_and_sigma():
    args = problem(requires_grad=False)
    with pytest.raises(ValueError, match='influence'):
        kp_aggregate(**args, influence='box')
    with pytest.raises(ValueError, match='sigma'):
        kp_aggregate(**args, sigma=-1.0, influence='gaussian')


@pytest.mark.parametrize('weights,neighbors,error,match', [
    (torch.zeros(6, 5, 3, dtype=torch.float64), None, ValueError, 'weights'),
    (torch.zeros(6, 4, 2, dtype=torch.float64), None, ValueError, 'weights'),
    (torch.zeros(6, 5, 2, dtype=torch.float32), None, TypeError, 'weights'),
    (torch.zeros(6, 5, 2, dtype=torch.float64), torch.full((6, 5), 9), RuntimeError,
     r'neighbors \(N = .*\) contains 9'),
])
def test_neighbor_aggregate_invalid(weights, neighbors, error, match):
    args = neighbor_problem()
    nb = args['neighbors'] if neighbors is None else neighbors
    with pytest.raises(error, match=match):
        neighbor_aggregate(nb, args['features'], weights)


def test_direct_op_calls_validate_in_cpp():
    args = problem(requires_grad=False)
    bad = {**args, 'neighbors': torch.full((6, 5), 9)}
    with pytest.raises(RuntimeError, match='neighbors'):
        torch.ops.fsdlite.kp_aggregate(*bad.values(), 0.5, 'linear', 'sum')
    with pytest.raises(RuntimeError, match='gen_weights'):
        torch.ops.fsdlite.kp_aggregate(*{**args, 'gen_weights': torch.zeros(6, 3, 3, dtype=torch.float64)}.values(),
                                       0.5, 'linear', 'sum')
    with pytest.raises(RuntimeError, match='neighbors'):
        torch.ops.fsdlite.neighbor_aggregate(torch.full((6, 5), -2), args['features'],
                                             torch.zeros(6, 5, 2, dtype=torch.float64))


@pytest.mark.cuda
@pytest.mark.parametrize('influence,aggregation', list(itertools.product(INFLUENCES, AGGREGATIONS)))
def test_cuda_matches_cpu(influence, aggregation):
    args = problem(m=300, n=200, h=10, k=6, c=16, w=4, dtype=torch.float32, per_query=True, seed=11)
    assert_cuda_matches_cpu(kp_aggregate, args, GRAD_KEYS, sigma=0.6, influence=influence, aggregation=aggregation)
    nb = neighbor_problem(m=200, n=150, h=8, c=16, w=4, seed=12, dtype=torch.float32)
    y = neighbor_aggregate(**nb)
    y_cuda = neighbor_aggregate(**{k: v.detach().cuda() for k, v in nb.items()})
    torch.testing.assert_close(y_cuda.cpu(), y.detach(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize('influence,aggregation', list(itertools.product(INFLUENCES, AGGREGATIONS)))
def test_generic_chunked_driver_matches_direct_cpu_kernels(influence, aggregation):
    """The chunked driver the CUDA build runs, bound to the CPU primitives, equals the direct CPU kernels."""
    args = problem(m=700, n=300, h=10, k=15, c=200, w=8, per_query=True, seed=12, requires_grad=False)
    params = (0.6, influence, aggregation)
    y = torch.ops.fsdlite.kp_aggregate(*args.values(), *params)
    torch.testing.assert_close(torch.ops.fsdlite._kp_aggregate_chunked(*args.values(), *params), y)
    grad = torch.randn_like(y)
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        direct = torch.ops.fsdlite.kp_aggregate_backward(grad, *args.values(), *params, mask)
        chunked = torch.ops.fsdlite._kp_aggregate_chunked_backward(grad, *args.values(), *params, mask)
        for d, c in zip(direct, chunked):
            torch.testing.assert_close(c, d)


@pytest.mark.parametrize('name', ['q_pts', 's_pts', 'kernel_points'])
def test_nan_positions_are_refused(name):
    """As every geometric op (knn, radius_neighbors, ...): NaN positions used to give NaN output rows."""
    args = problem(requires_grad=False)
    bad = args[name].clone()
    bad.view(-1)[-1] = float('inf')
    with pytest.raises(RuntimeError, match=f'kp_aggregate: {name} must contain only finite values, got inf'):  # C++
        kp_aggregate(**{**args, name: bad}, sigma=0.5)
