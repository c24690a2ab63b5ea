"""radius_neighbors and calibrate_neighbor_limit: reference equality (ties, boundary), cKDTree oracle,
properties, opcheck, invalid inputs, the S3DIS conference-room subset (KPConv-style layer)."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import cKDTree

from fsdlite.ops import calibrate_neighbor_limit, grid_subsample, radius_neighbors
from fsdlite.ops.radius_neighbors.reference import radius_neighbors_reference


def assert_same(got, want):
    assert torch.equal(got[0], want[0])
    assert torch.equal(got[1], want[1])


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('radius', [0.3, 0.7, 5.0])
def test_matches_reference(dtype, radius):
    gen = torch.Generator().manual_seed(0)
    query = torch.rand(400, 3, generator=gen, dtype=dtype) * 2
    support = torch.rand(600, 3, generator=gen, dtype=dtype) * 2
    got = radius_neighbors(query, support, radius, 12, return_counts=True)
    assert_same(got, radius_neighbors_reference(query, support, radius, 12))


def test_boundary_is_strict_and_ties_by_index():
    support = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0.5, 0, 0], [0, 0, 1.0], [0, 0.5, 0], [2.0, 0, 0]])
    query = torch.zeros(1, 3)
    index, counts = radius_neighbors(query, support, 1.0, 4, return_counts=True)
    assert counts.tolist() == [2]  # distance exactly 1 is outside
    assert index.tolist() == [[2, 4, 6, 6]]  # equal distances: lower index first; shadow index 6
    index, counts = radius_neighbors(query, support, 1.0001, 4, return_counts=True)
    assert counts.tolist() == [5] and index.tolist() == [[2, 4, 0, 1]]  # truncated, reported by counts


def test_matches_ckdtree():
    gen = torch.Generator().manual_seed(1)
    support = torch.rand(3000, 3, generator=gen, dtype=torch.float64)
    query = torch.rand(500, 3, generator=gen, dtype=torch.float64)
    index, counts = radius_neighbors(query, support, 0.1, 64, return_counts=True)
    tree = cKDTree(support.numpy())
    for row, found in enumerate(tree.query_ball_point(query.numpy(), 0.1)):
        found = sorted(found, key=lambda j: (float(((support[j] - query[row]) ** 2).sum()), j))
        assert counts[row] == len(found)
        assert index[row, :len(found)].tolist() == found[:64]
    assert counts.max() <= 64 and (index[counts < 64, -1] == 3000).all()


def test_batched_no_cross_sample_neighbours():
    gen = torch.Generator().manual_seed(2)
    qb = torch.tensor([0] * 20 + [2] * 15 + [3] * 5)  # sample 3 has no supports
    sb = torch.tensor([0] * 30 + [1] * 10 + [2] * 25)  # sample 1 has no queries
    query = torch.rand(len(qb), 3, generator=gen)
    support = torch.rand(len(sb), 3, generator=gen)
    index, counts = radius_neighbors(query, support, 0.5, 8, qb, sb, return_counts=True)
    assert_same((index, counts), radius_neighbors_reference(query, support, 0.5, 8, qb, sb))
    valid = index < len(sb)
    rows = torch.arange(len(qb))[:, None].expand_as(index)
    assert torch.equal(qb[rows[valid]], sb[index[valid]])
    assert (counts[qb == 3] == 0).all() and (index[qb == 3] == len(sb)).all()


def test_empty_inputs():
    index, counts = radius_neighbors(torch.zeros(0, 3), torch.rand(4, 3), 1.0, 5, return_counts=True)
    assert index.shape == (0, 5) and counts.shape == (0,)
    index, counts = radius_neighbors(torch.rand(3, 3), torch.zeros(0, 3), 1.0, 5, return_counts=True)
    assert (index == 0).all() and (counts == 0).all()


@st.composite
def problems(draw):
    nq, ns = draw(st.integers(0, 20)), draw(st.integers(0, 20))
    coords = st.integers(-2, 2)
    query = torch.tensor(draw(st.lists(st.lists(coords, min_size=3, max_size=3), min_size=nq, max_size=nq)),
                         dtype=torch.float32).reshape(nq, 3)
    support = torch.tensor(draw(st.lists(st.lists(coords, min_size=3, max_size=3), min_size=ns, max_size=ns)),
                           dtype=torch.float32).reshape(ns, 3)
    qb = sb = None
    if draw(st.booleans()):
        qb = torch.tensor(sorted(draw(st.lists(st.integers(0, 2), min_size=nq, max_size=nq))), dtype=torch.long)
        sb = torch.tensor(sorted(draw(st.lists(st.integers(0, 2), min_size=ns, max_size=ns))), dtype=torch.long)
    radius = draw(st.sampled_from([0.5, 1.0, 2 ** 0.5, 2.0, 3.5]))  # integer grid: many points on the sphere
    return query, support, radius, draw(st.integers(1, 6)), qb, sb


@settings(max_examples=60, deadline=None)
@given(problems())
def test_property_matches_reference(problem):
    query, support, radius, limit, qb, sb = problem
    index, counts = radius_neighbors(query, support, radius, limit, qb, sb, return_counts=True)
    assert_same((index, counts), radius_neighbors_reference(query, support, radius, limit, qb, sb))
    ns = support.shape[0]
    assert torch.equal((index < ns).sum(1), counts.clamp(max=limit))
    if ns:
        d = ((query[:, None] - support[index.clamp(max=ns - 1)]) ** 2).sum(-1)
        d[index == ns] = float('inf')
        assert (d[:, 1:] >= d[:, :-1]).all() and (d[index < ns] < radius ** 2).all()


def test_opcheck():
    gen = torch.Generator().manual_seed(3)
    query, support = torch.rand(25, 3, generator=gen), torch.rand(30, 3, generator=gen)
    op = torch.ops.fsdlite.radius_neighbors.default
    torch.library.opcheck(op, (query, support, 0.4, 6))
    torch.library.opcheck(op, (query, support, 0.4, 6, torch.tensor([0] * 10 + [1] * 15),
                               torch.tensor([0] * 14 + [1] * 16)))


@pytest.mark.parametrize('call, error, match', [
    (lambda q, s: radius_neighbors(q, s, float('nan'), 4), ValueError, 'radius must be finite and > 0, got nan'),
    (lambda q, s: radius_neighbors(q, s, float('inf'), 4), ValueError, 'radius must be finite'),
    (lambda q, s: radius_neighbors(q, s, 0.0, 4), ValueError, 'radius must be finite and > 0'),
    (lambda q, s: radius_neighbors(q, s, -1.0, 4), ValueError, 'radius must be finite and > 0'),
    (lambda q, s: radius_neighbors(q, s, 'a', 4), TypeError, 'radius must be a number'),
    (lambda q, s: radius_neighbors(q, s, 1.0, 0), ValueError, 'max_neighbors must be > 0, got 0'),
    (lambda q, s: radius_neighbors(q, s, 1.0, 2.0), TypeError, 'max_neighbors must be an int'),
    (lambda q, s: radius_neighbors(q.half(), s, 1.0, 4), TypeError, 'query must have one of the dtypes'),
    (lambda q, s: radius_neighbors(q, s[:, :2], 1.0, 4), ValueError, r'support.shape\[1\] must be 3'),
    (lambda q, s: radius_neighbors(q, s, 1.0, 4, torch.tensor([0, 0, 1, 0]), torch.zeros(5, dtype=torch.long)),
     RuntimeError, r'query_batch must be sorted non-decreasing .*got query_batch\[2\]=1 > query_batch\[3\]=0'),
    (lambda q, s: radius_neighbors(q, s, 1.0, 4, torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long)),
     ValueError, r'support_batch.shape\[0\] must be 5'),
    (lambda q, s: radius_neighbors(q, s, 1.0, 4, None, torch.zeros(5, dtype=torch.long)), ValueError, 'together'),
    (lambda q, s: radius_neighbors(q, s, 1.0, 2 ** 62), ValueError, r'max_neighbors=4611686018427387904 gives an'),
    (lambda q, s: radius_neighbors(q, s, 1.0, 2 ** 40), ValueError, r'max_neighbors=1099511627776 asks for an output'),
    (lambda q, s: radius_neighbors(q, s, 1.0, 4, torch.zeros(4, dtype=torch.long),
                                   torch.zeros(5, dtype=torch.long, device='meta')),
     ValueError, 'all tensors must be on one device, got .* support_batch on meta'),
])
def test_invalid_inputs_raise(call, error, match):
    q, s = torch.rand(4, 3), torch.rand(5, 3)
    with pytest.raises(error, match=match):
        call(q, s)


@pytest.mark.parametrize('args, match', [
    ((1.0, 0), 'max_neighbors must be >= 1'),
    ((float('nan'), 3), 'radius must be finite'),
    ((-2.0, 3), 'radius must be finite and > 0'),
    ((1.0, 2 ** 62), r'max_neighbors=4611686018427387904 gives an output of .* more than int64'),
])
def test_kernel_validates_before_running(args, match):
    with pytest.raises(RuntimeError, match=match):
        torch.ops.fsdlite.radius_neighbors(torch.rand(4, 3), torch.rand(5, 3), *args)


def test_calibrate_neighbor_limit():
    counts = torch.arange(1, 11)  # 1..10
    assert calibrate_neighbor_limit(counts) == 9  # 9 of 10 neighbourhoods (90 %) have <= 9 neighbours
    assert calibrate_neighbor_limit(counts, quantile=1.0) == 10
    assert calibrate_neighbor_limit(counts, quantile=0.05) == 1
    assert calibrate_neighbor_limit([counts[:4], counts[4:].int()], 0.5) == 5
    assert calibrate_neighbor_limit(torch.zeros(7, dtype=torch.long)) == 1  # never a zero-width result
    gen = torch.Generator().manual_seed(4)
    many = torch.randint(0, 60, (1001,), generator=gen)
    limit = calibrate_neighbor_limit(many, 0.9)
    assert (many <= limit).float().mean() >= 0.9 > (many <= limit - 1).float().mean()


@pytest.mark.parametrize('call, error, match', [
    (lambda: calibrate_neighbor_limit(torch.zeros(0, dtype=torch.long)), ValueError, 'counts is empty'),
    (lambda: calibrate_neighbor_limit(torch.tensor([3, -1])), ValueError, 'counts must be >= 0, got -1'),
    (lambda: calibrate_neighbor_limit(torch.ones(3)), TypeError, 'counts must have one of the dtypes'),
    (lambda: calibrate_neighbor_limit(torch.ones(3, dtype=torch.long), 0.0), ValueError,
     r'quantile must lie in \(0, 1\]'),
    (lambda: calibrate_neighbor_limit(torch.ones(3, dtype=torch.long), 1.5), ValueError, 'quantile must lie'),
    (lambda: calibrate_neighbor_limit(torch.ones(3, dtype=torch.long), 'x'), TypeError, 'quantile must be a number'),
])
def test_calibrate_invalid(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_s3dis_kpconv_layer(shared_data):
    """S3DIS Area 5 conferenceRoom_1 subset (DERIVED from SysCV/vis4d-test-data@8e92136): a KPConv first
    layer -- grid subsample at 4 cm, radius 2.5 * 4 cm neighbours with a calibrated limit, vs cKDTree."""
    xyz = np.load(shared_data / 's3dis_area5_conf1' / 'area5_conferenceRoom_1_subset.npz')['xyz']
    points = grid_subsample(torch.from_numpy(xyz), 0.04).points
    radius = 0.1
    _, counts = radius_neighbors(points, points, radius, 1, return_counts=True)
    limit = calibrate_neighbor_limit(counts, 0.9)
    index, counts2 = radius_neighbors(points, points, radius, limit, return_counts=True)
    assert torch.equal(counts, counts2) and (counts > limit).float().mean() <= 0.1
    pts64 = points.double().numpy()
    found = cKDTree(pts64).query_ball_point(pts64, radius * (1 - 1e-6), return_length=True)
    found_out = cKDTree(pts64).query_ball_point(pts64, radius * (1 + 1e-6), return_length=True)
    assert ((counts.numpy() >= found) & (counts.numpy() <= found_out)).all()
    rows = torch.arange(0, len(points), 97)
    assert_same((index[rows], counts[rows]),
                radius_neighbors_reference(points[rows], points, radius, limit))


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_cuda_matches_cpu(dtype):
    gen = torch.Generator().manual_seed(5)
    support = torch.randint(0, 5, (3000, 3), generator=gen).to(dtype)
    query = torch.randint(0, 5, (2000, 3), generator=gen).to(dtype)
    qb = torch.sort(torch.randint(0, 4, (2000,), generator=gen)).values
    sb = torch.sort(torch.randint(0, 4, (3000,), generator=gen)).values
    for extra in ((), (qb, sb)):
        want = radius_neighbors(query, support, 2 ** 0.5, 20, *extra, return_counts=True)
        got = radius_neighbors(query.cuda(), support.cuda(), 2 ** 0.5, 20, *[e.cuda() for e in extra],
                               return_counts=True)
        assert_same((got[0].cpu(), got[1].cpu()), want)
