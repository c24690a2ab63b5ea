"""voxelize: reference, golden data (mmcv, spconv), properties, invalid inputs, opcheck, CUDA."""
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.ops import Voxelization, grid_shape, voxelize
from fsdlite.ops.voxelize.reference import voxelize_reference

SIZE = [0.5, 0.5, 0.5]
RANGE = [-2.0, -2.0, -1.0, 2.0, 2.0, 1.0]  # grid (4, 8, 8)


def assert_same(result, expected):
    assert isinstance(result, Voxelization)
    for name, got, want in zip(Voxelization._fields, result, expected):
        assert got.dtype == torch.int64, name
        assert torch.equal(got, want), f'{name}: {got} != {want}'


def cloud(n, seed=0, dtype=torch.float32, spread=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, 4, generator=g, dtype=dtype) - 0.5) * spread


def check_invariants(points, res, size=SIZE, point_range=RANGE):
    """Consistency every result must satisfy, independent of the reference."""
    n = points.shape[0]
    valid = res.point2voxel >= 0
    assert int(res.voxel_counts.sum()) + int(res.num_out_of_range) + int(res.num_non_finite) == n
    assert torch.equal(valid, (res.point_coors >= 0).all(1))
    assert torch.equal(torch.bincount(res.point2voxel[valid], minlength=res.voxel_coors.shape[0]), res.voxel_counts)
    assert torch.equal(res.voxel_coors[res.point2voxel[valid]], res.point_coors[valid])
    assert torch.unique(res.voxel_coors, dim=0).shape[0] == res.voxel_coors.shape[0]
    # first-occurrence order: first point of voxel v comes before the first point of voxel v + 1
    rows = torch.arange(n)[valid]
    first = torch.full((res.voxel_coors.shape[0],), n).scatter_reduce(0, res.point2voxel[valid], rows, 'amin')
    assert bool((first[1:] > first[:-1]).all())
    # every included point lies inside its voxel (float64, tolerance for the float32 floor)
    xyz = points[valid, :3].double()
    zyx = res.point_coors[valid, 1:].double()
    lower = torch.tensor(point_range[:3], dtype=torch.float64)
    s = torch.tensor(size, dtype=torch.float64)
    cell = (xyz - lower) / s - zyx.flip(1)
    assert bool(((cell > -1e-4) & (cell < 1 + 1e-4)).all())


# ------------------------------------------------------------------------------------------ basics
def test_grid_shape_rounds_half_away_from_zero():
    assert grid_shape(SIZE, RANGE) == (4, 8, 8)
    assert grid_shape([0.5, 0.5, 0.5], [0, -40, -3, 70.4, 40, 1]) == (8, 160, 141)
    assert grid_shape([0.1, 0.1, 0.1], [-80, -80, -2, 80, 80, 6]) == (80, 1600, 1600)
    assert grid_shape([0.5, 1.0, 1.0], [0, 0, 0, 1.25, 1, 1]) == (1, 1, 3)  # 2.5 -> 3


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('with_batch', [False, True])
def test_matches_reference(dtype, with_batch):
    points = cloud(300, dtype=dtype)
    points[3, 0] = float('nan')
    points[10, 2] = float('inf')
    points[11, 1] = -float('inf')
    batch = torch.randint(0, 3, (300,), generator=torch.Generator().manual_seed(1)) if with_batch else None
    res = voxelize(points, SIZE, RANGE, batch)
    assert_same(res, voxelize_reference(points, SIZE, RANGE, batch))
    assert int(res.num_non_finite) == 3
    check_invariants(points, res)


def test_hand_case_boundaries_and_order():
    points = torch.tensor([
        [0.1, 0.1, 0.1],      # voxel (z2, y4, x4)
        [-2.0, -2.0, -1.0],   # exactly at min: inside, voxel (0, 0, 0)
        [2.0, 0.0, 0.0],      # exactly at x max: outside
        [1.99, 1.99, 0.99],   # last voxel (3, 7, 7)
        [0.2, 0.4, 0.3],      # same voxel as the first point
        [-2.0001, 0.0, 0.0],  # just below x min: outside
        [float('nan'), 0.0, 0.0],
    ])
    res = voxelize(points, SIZE, RANGE)
    assert res.voxel_coors.tolist() == [[0, 2, 4, 4], [0, 0, 0, 0], [0, 3, 7, 7]]
    assert res.point2voxel.tolist() == [0, 1, -1, 2, 0, -1, -1]
    assert res.voxel_counts.tolist() == [2, 1, 1]
    assert res.point_coors[2].tolist() == [-1, -1, -1, -1]
    assert (int(res.num_out_of_range), int(res.num_non_finite)) == (2, 1)


def test_extra_columns_and_non_contiguous_points():
    points = cloud(200)
    strided = torch.cat([points, points], 1)[:, ::2]  # non-contiguous (N, 4)
    assert not strided.is_contiguous()
    assert_same(voxelize(strided, SIZE, RANGE), voxelize_reference(strided.contiguous(), SIZE, RANGE))
    assert_same(voxelize(points[:, :3], SIZE, RANGE), voxelize(points, SIZE, RANGE))


@pytest.mark.parametrize('with_batch', [False, True])
def test_empty_cloud(with_batch):
    points = torch.zeros(0, 4)
    batch = torch.zeros(0, dtype=torch.long) if with_batch else None
    res = voxelize(points, SIZE, RANGE, batch)
    assert [tuple(t.shape) for t in res] == [(0, 4), (0,), (0,), (0, 4), (), ()]
    assert int(res.num_out_of_range) == int(res.num_non_finite) == 0


def test_all_points_excluded():
    points = torch.tensor([[10.0, 0, 0], [float('nan'), 0, 0], [0, 0, 5.0]])
    res = voxelize(points, SIZE, RANGE)
    assert res.voxel_coors.shape == (0, 4) and res.point2voxel.tolist() == [-1, -1, -1]
    assert (int(res.num_out_of_range), int(res.num_non_finite)) == (2, 1)


def test_thread_count_does_not_change_the_result():
    """Many chunks and hash partitions (50k points); 1 vs 2 threads and vs the reference."""
    points = cloud(50_000, seed=3, spread=4.2)
    batch = torch.randint(0, 2, (50_000,), generator=torch.Generator().manual_seed(4))
    one = voxelize(points, [0.05, 0.05, 0.05], RANGE, batch)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = voxelize(points, [0.05, 0.05, 0.05], RANGE, batch)
    finally:
        torch.set_num_threads(previous)
    assert_same(two, one)
    assert_same(one, voxelize_reference(points, [0.05, 0.05, 0.05], RANGE, batch))


# --------------------------------------------------------------------------------------- golden data
def test_mmcv_golden(shared_data):
    """open-mmlab/mmcv@a8073c74:tests/data/for_3d_ops/test_voxel.npy (key names swapped in mmcv)."""
    gold = np.load(shared_data / 'mmcv_golden' / 'test_voxel.npy', allow_pickle=True).item()
    points = torch.from_numpy(gold['points'])
    res = voxelize(points, [0.5, 0.5, 0.5], [0, -40, -3, 70.4, 40, 1])
    assert np.array_equal(res.voxel_coors[:, 1:].numpy(), gold['voxels'])  # (z, y, x), first occurrence
    assert np.array_equal(res.voxel_counts.numpy(), gold['num_points_per_voxel'])
    assert int(res.num_out_of_range) == 20 and int(res.num_non_finite) == 0
    for v in range(res.voxel_coors.shape[0]):  # per-voxel point features, in point order
        count = int(res.voxel_counts[v])
        assert np.array_equal(points[res.point2voxel == v].numpy(), gold['coors'][v, :count])


def test_spconv_golden(shared_data):
    """traveller59/spconv@263d6b4:test/data/{benchmark-pc.npz,test_spconv.pkl}: hard voxelization, 1 point."""
    points = torch.from_numpy(np.load(shared_data / 'spconv_waymo' / 'benchmark-pc.npz')['pc'])
    with open(shared_data / 'spconv_waymo' / 'test_spconv.pkl', 'rb') as f:
        voxels, coors, shape = pickle.load(f)
    assert grid_shape([0.1] * 3, [-80, -80, -2, 80, 80, 6]) == tuple(shape)
    res = voxelize(points, [0.1] * 3, [-80, -80, -2, 80, 80, 6])
    assert np.array_equal(res.voxel_coors.numpy(), coors.astype(np.int64))
    valid = res.point2voxel >= 0
    first = torch.full((coors.shape[0],), points.shape[0]).scatter_reduce(
        0, res.point2voxel[valid], torch.arange(points.shape[0])[valid], 'amin')
    assert np.array_equal(points[first].numpy(), voxels)


# ---------------------------------------------------------------------------------------- properties
settings.register_profile('voxelize', max_examples=40, deadline=None)

coords = st.floats(-3, 3, width=32, allow_nan=False)
point_lists = st.lists(st.tuples(coords, coords, coords), min_size=0, max_size=60)
sizes = st.sampled_from([0.25, 0.5, 0.7, 1.0])


@settings(max_examples=40, deadline=None)
@given(point_lists, sizes, st.integers(0, 2**31 - 1))
def test_property_matches_reference_and_invariants(pts, size, seed):
    points = torch.tensor(pts, dtype=torch.float32).view(-1, 3)
    batch = torch.randint(0, 3, (points.shape[0],), generator=torch.Generator().manual_seed(seed))
    res = voxelize(points, [size] * 3, RANGE, batch)
    assert_same(res, voxelize_reference(points, [size] * 3, RANGE, batch))
    check_invariants(points, res, [size] * 3)


@settings(max_examples=30, deadline=None)
@given(point_lists.filter(len), st.integers(0, 2**31 - 1))
def test_property_permutation_keeps_voxels_and_counts(pts, seed):
    points = torch.tensor(pts, dtype=torch.float32)
    perm = torch.randperm(points.shape[0], generator=torch.Generator().manual_seed(seed))
    a, b = voxelize(points, SIZE, RANGE), voxelize(points[perm], SIZE, RANGE)
    assert torch.equal(b.point_coors, a.point_coors[perm])
    count_a = {tuple(c): int(n) for c, n in zip(a.voxel_coors.tolist(), a.voxel_counts)}
    count_b = {tuple(c): int(n) for c, n in zip(b.voxel_coors.tolist(), b.voxel_counts)}
    assert count_a == count_b


@settings(max_examples=30, deadline=None)
@given(point_lists)
def test_property_duplicates_double_counts(pts):
    points = torch.tensor(pts, dtype=torch.float32).view(-1, 3)
    a, b = voxelize(points, SIZE, RANGE), voxelize(torch.cat([points, points]), SIZE, RANGE)
    assert torch.equal(b.voxel_coors, a.voxel_coors)
    assert torch.equal(b.voxel_counts, 2 * a.voxel_counts)
    assert torch.equal(b.point2voxel, torch.cat([a.point2voxel, a.point2voxel]))
    assert int(b.num_out_of_range) == 2 * int(a.num_out_of_range)


@settings(max_examples=30, deadline=None)
@given(st.lists(point_lists, min_size=1, max_size=4), st.integers(0, 2**31 - 1))
def test_property_batches_are_separate(samples, seed):
    """Interleaved samples: each sample's voxels equal voxelizing it alone (batch column set)."""
    parts = [torch.tensor(s, dtype=torch.float32).view(-1, 3) for s in samples]
    batch = torch.cat([torch.full((p.shape[0],), b, dtype=torch.long) for b, p in enumerate(parts)])
    perm = torch.randperm(batch.numel(), generator=torch.Generator().manual_seed(seed))
    points, batch = torch.cat(parts)[perm], batch[perm]
    res = voxelize(points, SIZE, RANGE, batch)
    for b, part in enumerate(parts):
        alone = voxelize(points[batch == b], SIZE, RANGE)
        mine = res.voxel_coors[res.voxel_coors[:, 0] == b]
        assert torch.equal(mine[:, 1:], alone.voxel_coors[:, 1:])
        assert bool((mine[:, 0] == b).all())
        assert torch.equal(res.voxel_counts[res.voxel_coors[:, 0] == b], alone.voxel_counts)


# ----------------------------------------------------------------------------------- invalid inputs
GOOD = cloud(5)


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(points=GOOD.int()), TypeError, 'points must have one of the dtypes'),
    (dict(points=GOOD.half()), TypeError, 'points must have one of the dtypes'),
    (dict(points=GOOD[:, :2]), ValueError, r'points must have shape \(N, >=3\)'),
    (dict(points=GOOD[:, 0]), ValueError, 'points must be 2-D'),
    (dict(points=GOOD.numpy()), TypeError, 'points must be a torch.Tensor'),
    (dict(voxel_size=[0.5, 0.5]), ValueError, 'voxel_size must be a sequence of 3 numbers'),
    (dict(voxel_size=[0.5, 0.0, 0.5]), ValueError, 'voxel_size must be > 0'),
    (dict(voxel_size=[0.5, -1, 0.5]), ValueError, 'voxel_size must be > 0'),
    (dict(voxel_size=[0.5, float('nan'), 0.5]), ValueError, 'voxel_size must contain only finite'),
    (dict(voxel_size=['a', 1, 1]), TypeError, 'voxel_size must contain only numbers'),
    (dict(point_range=[0, 0, 0, 1, 1]), ValueError, 'point_range must be a sequence of 6'),
    (dict(point_range=[0, 0, 0, 1, -1, 1]), ValueError, 'max > min'),
    (dict(point_range=[0, 0, 0, 1, 0, 1]), ValueError, 'max > min'),
    (dict(point_range=[0, 0, 0, 1, 1, float('inf')]), ValueError, 'point_range must contain only finite'),
    (dict(point_range=[0, 0, 0, 1, 1, 0.2]), ValueError, 'gives 0 voxels on axis z'),
    (dict(batch=torch.tensor([0, 1, -1, 0, 0])), RuntimeError, 'batch ids must be >= 0, got -1'),  # checked in C++
    (dict(batch=torch.zeros(4, dtype=torch.long)), ValueError, r'batch.shape\[0\] must be 5'),
    (dict(batch=torch.zeros(5)), TypeError, 'batch must have one of the dtypes'),
    (dict(batch=torch.zeros(5, 1, dtype=torch.long)), ValueError, 'batch must be 1-D'),
    (dict(batch=torch.full((5,), 2**40), voxel_size=[1e-6] * 3), ValueError, 'more than 2\\^63'),
])
def test_invalid_inputs_raise(kwargs, error, match):
    args = dict(points=GOOD, voxel_size=SIZE, point_range=RANGE, batch=None)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        voxelize(**args)


@pytest.mark.parametrize('args, match', [
    ((GOOD.int(), SIZE, RANGE, None), 'points must have dtype float32 or float64'),
    ((GOOD[:, :2], SIZE, RANGE, None), r'points must have shape \(N, >=3\)'),
    ((GOOD, [0.5, 0.5], RANGE, None), 'voxel_size must have 3 values'),
    ((GOOD, [0.5, -0.5, 0.5], RANGE, None), 'voxel_size must be finite and > 0'),
    ((GOOD, SIZE, [0, 0, 0, 1, 1, -1], None), 'max > min'),
    ((GOOD, SIZE, [0, 0, 0, 1, 1, 0.1], None), 'expected at least 1'),
    ((GOOD, SIZE, RANGE, torch.tensor([0, 0, -3, 0, 0])), 'batch ids must be >= 0'),
    ((GOOD, SIZE, RANGE, torch.zeros(3, dtype=torch.long)), 'must equal points.size'),
    ((GOOD, SIZE, RANGE, torch.zeros(5, dtype=torch.int32)), 'batch must have dtype Long'),
    ((GOOD, [1e-6] * 3, RANGE, torch.full((5,), 2**40)), 'more than 2\\^63'),
])
def test_kernel_validates_before_running(args, match):
    """The C++ op raises (never crashes) when called directly with bad arguments."""
    with pytest.raises(RuntimeError, match=match):
        torch.ops.fsdlite.voxelize(*args)


# ------------------------------------------------------------------------------------------- opcheck
@pytest.mark.parametrize('with_batch', [False, True])
def test_opcheck(with_batch):
    points = cloud(64)
    batch = torch.randint(0, 2, (64,), generator=torch.Generator().manual_seed(0)) if with_batch else None
    torch.library.opcheck(torch.ops.fsdlite.voxelize.default, (points, SIZE, RANGE, batch))


# ---------------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_cuda_matches_cpu(dtype):
    points = cloud(20_000, dtype=dtype, spread=4.2)
    points[::97, 1] = float('nan')
    batch = torch.randint(0, 3, (20_000,), generator=torch.Generator().manual_seed(2))
    cpu = voxelize(points, [0.05] * 3, RANGE, batch)
    gpu = voxelize(points.cuda(), [0.05] * 3, RANGE, batch.cuda())
    assert all(t.is_cuda for t in gpu)
    assert_same(Voxelization(*(t.cpu() for t in gpu)), cpu)


@pytest.mark.cuda
def test_cuda_empty_and_opcheck():
    res = voxelize(torch.zeros(0, 3, device='cuda'), SIZE, RANGE)
    assert res.voxel_coors.shape == (0, 4) and res.voxel_coors.is_cuda
    torch.library.opcheck(torch.ops.fsdlite.voxelize.default, (cloud(64).cuda(), SIZE, RANGE, None))


@pytest.mark.cuda
def test_cuda_spconv_golden(shared_data):
    """traveller59/spconv@263d6b4:test/data/{benchmark-pc.npz,test_spconv.pkl} on the GPU."""
    points = torch.from_numpy(np.load(shared_data / 'spconv_waymo' / 'benchmark-pc.npz')['pc'])
    with open(shared_data / 'spconv_waymo' / 'test_spconv.pkl', 'rb') as f:
        _, coors, _ = pickle.load(f)
    res = voxelize(points.cuda(), [0.1] * 3, [-80, -80, -2, 80, 80, 6])
    assert np.array_equal(res.voxel_coors.cpu().numpy(), coors.astype(np.int64))
