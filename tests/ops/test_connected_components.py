"""connected_components: against scipy.sparse.csgraph, the pure-torch reference, real lidar frames,
hypothesis properties (permutation, empty, duplicates, exact-threshold ties, class/batch
separation), opcheck, invalid inputs, and CUDA vs CPU."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components as scipy_cc
from scipy.spatial import cKDTree

from fsdlite.ops import connected_components
from fsdlite.ops.connected_components.reference import canonical_labels, connected_components_reference

SETTINGS = settings(max_examples=25, deadline=None)


def scipy_labels_from_pairs(n, i, j):
    """Labels ordered by first point (as the op) of the graph with edges (i, j), via scipy."""
    adj = coo_matrix((np.ones(len(i)), (np.asarray(i), np.asarray(j))), shape=(n, n))
    _, comp = scipy_cc(adj, directed=False)
    return canonical_labels(torch.from_numpy(comp).long())


def scipy_labels_dense(points, threshold, batch=None, class_ids=None, metric='xy'):
    """Oracle: dense float64 distance matrix (small n), strict threshold, same sample/class."""
    d = 2 if metric == 'xy' else 3
    p = points[:, :d].double().numpy()
    n = len(p)
    dist2 = ((p[:, None] - p[None]) ** 2).sum(-1)
    classes = np.zeros(n, np.int64) if class_ids is None else class_ids.numpy()
    t = np.asarray(threshold, np.float64)
    t = t[classes] if t.ndim else np.full(n, float(t))
    adj = dist2 < (t ** 2)[:, None]
    adj &= classes[:, None] == classes[None]
    if batch is not None:
        adj &= batch.numpy()[:, None] == batch.numpy()[None]
    i, j = np.nonzero(adj)
    return scipy_labels_from_pairs(n, i, j)


def clustered_points(n, seed, extent=20.0, clusters=12, spread=0.4, dims=3):
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(clusters, dims, generator=g) * extent
    assign = torch.randint(0, clusters, (n,), generator=g)
    return centres[assign] + torch.randn(n, dims, generator=g) * spread


def same_partition(a, b):
    return torch.equal(canonical_labels(a)[0], canonical_labels(b)[0])


# ------------------------------------------------------------------------------------------ oracles
@pytest.mark.parametrize('metric', ['xy', 'xyz'])
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_matches_scipy_dense(metric, seed):
    points = clustered_points(400, seed, extent=8.0, spread=0.5)
    labels, num = connected_components(points, 0.45, metric=metric)
    expected, k = scipy_labels_dense(points, 0.45, metric=metric)
    assert num == k
    assert torch.equal(labels, expected)


def test_matches_scipy_with_batch_and_per_class_thresholds():
    g = torch.Generator().manual_seed(3)
    points = clustered_points(500, 3, extent=6.0, spread=0.6)
    batch = torch.randint(0, 3, (500,), generator=g)
    classes = torch.randint(0, 3, (500,), generator=g)
    thr = torch.tensor([0.6, 0.1, 0.4])  # FSD's Car / Ped / Cyc connected_dist
    labels, num = connected_components(points, thr, batch=batch, class_ids=classes)
    expected, k = scipy_labels_dense(points, thr.numpy(), batch, classes)
    assert (num, labels.tolist()) == (k, expected.tolist())


@pytest.mark.parametrize('metric', ['xy', 'xyz'])
def test_matches_reference_on_clusters(metric):
    points = clustered_points(3000, 4, extent=30.0, clusters=40, spread=0.3)
    classes = (points[:, 0] > 15).long()
    labels, num = connected_components(points, [0.5, 0.2], class_ids=classes, metric=metric)
    ref, k = connected_components_reference(points, torch.tensor([0.5, 0.2]), class_ids=classes, metric=metric)
    assert num == k
    assert torch.equal(labels, ref)


def test_reference_matches_scipy():
    points = clustered_points(300, 5, extent=6.0)
    batch = torch.arange(300) % 2
    ref, k = connected_components_reference(points, 0.5, batch=batch, metric='xyz')
    expected, ke = scipy_labels_dense(points, 0.5, batch=batch, metric='xyz')
    assert k == ke and torch.equal(ref, expected)


def kdtree_labels(xyz, t):
    """Oracle for larger inputs: cKDTree pairs within t, filtered to float64 distance < t, then scipy."""
    xyz = np.asarray(xyz, np.float64)
    pairs = cKDTree(xyz).query_pairs(t, output_type='ndarray')
    d2 = ((xyz[pairs[:, 0]] - xyz[pairs[:, 1]]) ** 2).sum(1)
    pairs = pairs[d2 < t * t]
    return scipy_labels_from_pairs(len(xyz), pairs[:, 0], pairs[:, 1])


def test_real_kitti_frame_matches_kdtree(shared_data):
    # KITTI object frame 8 (open-mmlab/mmdetection3d@fe25f7a:demo/data/kitti/000008.bin), 17,238 points.
    pts = np.fromfile(shared_data / 'kitti_object_000008' / '000008.bin', np.float32).reshape(-1, 4)
    labels, num = connected_components(torch.from_numpy(pts), 0.25, metric='xyz')
    expected, k = kdtree_labels(pts[:, :3], 0.25)
    assert num == k and 100 < k < len(pts)
    assert torch.equal(labels, expected)


def test_real_nuscenes_sweep_bev_matches_kdtree(shared_data):
    # nuScenes keyframe (open-mmlab/mmdetection3d@fe25f7a:demo/data/nuscenes/...LIDAR_TOP...pcd.bin), 34,688
    # points; 2,232 of them (ego vehicle) share one 0.2 m cell, a dense worst case.
    path = shared_data / 'nuscenes_demo' / 'LIDAR_TOP_1532402927647951.pcd.bin'
    pts = np.fromfile(path, np.float32).reshape(-1, 5)
    labels, num = connected_components(torch.from_numpy(pts), 0.2, metric='xy')
    expected, k = kdtree_labels(pts[:, :2], 0.2)
    assert num == k and torch.equal(labels, expected)


# ------------------------------------------------------------------------------------------ hand cases
def test_exact_threshold_distance_is_not_linked():
    points = torch.tensor([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0 + 5.0 - 1e-9]], dtype=torch.float64)
    labels, num = connected_components(points, 5.0)
    assert num == 2 and labels.tolist() == [0, 1, 1]
    labels, num = connected_components(points, 5.0 + 1e-9)
    assert num == 1


def test_chain_is_transitive_and_labels_follow_first_point():
    points = torch.tensor([[10.0, 0, 0], [0.0, 0, 0], [0.9, 0, 0], [1.8, 0, 0], [10.5, 0, 0], [2.7, 0, 0]])
    labels, num = connected_components(points, 1.0)
    assert num == 2 and labels.tolist() == [0, 1, 1, 1, 0, 1]


def test_metric_xyz_separates_stacked_points():
    points = torch.tensor([[0.0, 0, 0], [0.0, 0, 2.0]])
    assert connected_components(points, 1.0, metric='xy')[1] == 1
    assert connected_components(points, 1.0, metric='xyz')[1] == 2


def test_zero_threshold_links_nothing_even_duplicates():
    points = torch.zeros(5, 3)
    labels, num = connected_components(points, 0.0)
    assert num == 5 and labels.tolist() == [0, 1, 2, 3, 4]


def test_zero_threshold_for_one_class_only():
    points = torch.zeros(4, 2)
    classes = torch.tensor([0, 1, 0, 1])
    labels, num = connected_components(points, torch.tensor([0.5, 0.0]), class_ids=classes)
    assert num == 3 and labels.tolist() == [0, 1, 0, 2]


@pytest.mark.parametrize('dtype', [torch.float16, torch.float32, torch.float64])
def test_dtypes_and_int32_ids(dtype):
    points = clustered_points(200, 6, extent=5.0).to(dtype)
    batch = (torch.arange(200) % 2).int()
    labels, num = connected_components(points, 0.5, batch=batch)
    expected, k = scipy_labels_dense(points, 0.5, batch=batch.long())
    assert num == k and torch.equal(labels, expected)


def test_extra_columns_and_negative_coordinates():
    points = clustered_points(300, 7, extent=10.0) - 5.0
    wide = torch.cat([points, torch.randn(300, 2)], 1)
    assert torch.equal(connected_components(wide, 0.4, metric='xyz')[0],
                       connected_components(points, 0.4, metric='xyz')[0])


def test_empty_input():
    labels, num = connected_components(torch.zeros(0, 3), 0.5, batch=torch.zeros(0, dtype=torch.long))
    assert num == 0 and labels.shape == (0,) and labels.dtype == torch.long


def test_large_coordinates_with_small_threshold():
    points = torch.tensor([[1e6, 1e6], [1e6 + 0.01, 1e6]], dtype=torch.float64)
    assert connected_components(points, 0.02)[1] == 1
    assert connected_components(points, 0.005)[1] == 2


# ------------------------------------------------------------------------------------------ properties
# Coordinates on a 0.25 grid and thresholds that are multiples of 0.25 make every squared distance
# exact, so ties at exactly the threshold are common.
grid_points = st.integers(0, 120).flatmap(
    lambda n: st.lists(st.tuples(*[st.integers(-6, 6)] * 3), min_size=n, max_size=n))


@SETTINGS
@given(coords=grid_points, t_quarters=st.integers(1, 6), metric=st.sampled_from(['xy', 'xyz']))
def test_property_matches_scipy_with_exact_ties(coords, t_quarters, metric):
    points = torch.tensor(coords, dtype=torch.float32).reshape(-1, 3) * 0.25
    labels, num = connected_components(points, t_quarters * 0.25, metric=metric)
    expected, k = scipy_labels_dense(points, t_quarters * 0.25, metric=metric)
    assert num == k and torch.equal(labels, expected)


@SETTINGS
@given(coords=grid_points, seed=st.integers(0, 2 ** 31 - 1))
def test_property_permutation_invariant_partition(coords, seed):
    points = torch.tensor(coords, dtype=torch.float32).reshape(-1, 3) * 0.25
    labels, num = connected_components(points, 0.5)
    perm = torch.randperm(len(points), generator=torch.Generator().manual_seed(seed))
    labels_perm, num_perm = connected_components(points[perm], 0.5)
    assert num_perm == num
    assert same_partition(labels_perm, labels[perm])


@SETTINGS
@given(coords=grid_points, copies=st.integers(1, 3))
def test_property_duplicates_join_their_original(coords, copies):
    points = torch.tensor(coords, dtype=torch.float32).reshape(-1, 3) * 0.25
    n = len(points)
    doubled = torch.cat([points] * (copies + 1))
    labels, num = connected_components(doubled, 0.3)
    base, num_base = connected_components(points, 0.3)
    assert num == num_base
    assert torch.equal(labels, base.repeat(copies + 1)) or n == 0


@SETTINGS
@given(coords=grid_points, data=st.data())
def test_property_class_and_batch_separation(coords, data):
    points = torch.tensor(coords, dtype=torch.float32).reshape(-1, 3) * 0.25
    n = len(points)
    classes = torch.tensor(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=torch.long)
    batch = torch.tensor(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=torch.long)
    labels, num = connected_components(points, 0.75, batch=batch, class_ids=classes)
    # every component lies in one (sample, class) and equals the component of that subset alone
    total = 0
    for b in range(2):
        for c in range(3):
            sel = (batch == b) & (classes == c)
            sub, k = connected_components(points[sel], 0.75)
            total += k
            assert same_partition(labels[sel], sub)
            assert not bool(torch.isin(labels[sel], labels[~sel]).any())
    assert num == total


# ------------------------------------------------------------------------------------------ opcheck
def test_opcheck():
    points = clustered_points(64, 8, extent=3.0)
    classes = torch.arange(64) % 2
    thr = torch.tensor([0.5, 0.3], dtype=torch.float64)
    torch.library.opcheck(torch.ops.fsdlite.connected_components.default, (points, thr, None, classes, 3, True))
    torch.library.opcheck(torch.ops.fsdlite.connected_components.default,
                          (points, thr[:1], torch.arange(64) % 3, None, 2, False))


# ------------------------------------------------------------------------------------------ invalid
@pytest.mark.parametrize('kwargs, error, match', [
    (dict(points=torch.zeros(4, 3, dtype=torch.long)), TypeError, 'points must be a floating'),
    (dict(points=torch.zeros(4)), ValueError, 'points must be 2-D'),
    (dict(points=torch.zeros(4, 2), metric='xyz'), ValueError, r'points.shape\[1\] must be >= 3'),
    # values (finite points, class_ids in range, a threshold the coordinates allow): checked once, by the C++ op
    (dict(points=torch.tensor([[0.0, float('nan')]])), RuntimeError,
     r'points must contain only finite values, got nan at points\[0, 1\]'),
    (dict(metric='manhattan'), ValueError, "metric must be one of"),
    (dict(threshold=-0.1), ValueError, 'threshold must be finite and >= 0'),
    (dict(threshold=float('inf')), ValueError, 'threshold must be finite'),
    (dict(threshold='0.5'), TypeError, 'threshold must be a number'),
    (dict(threshold=torch.zeros(2, 2)), ValueError, 'threshold must be a scalar or a'),
    (dict(threshold=torch.tensor([0.5, 0.2])), ValueError, 'needs class_ids'),
    (dict(threshold=torch.tensor([0.5, 0.2]), class_ids=torch.tensor([0, 1, 2, 0])), RuntimeError,
     r'class_ids contains 2, expected values in \[0, 2\)'),
    (dict(batch=torch.zeros(3, dtype=torch.long)), ValueError, r'batch.shape\[0\] must be 4'),
    (dict(batch=torch.zeros(4)), TypeError, 'batch must have one of the dtypes'),
    (dict(class_ids=torch.zeros(4, 1, dtype=torch.long)), ValueError, 'class_ids must be 1-D'),
    (dict(threshold=1e-300), RuntimeError, 'threshold=1e-300 is too small'),
    (dict(threshold=torch.tensor(0.5, device='meta')), ValueError, 'got points on cpu, threshold on meta'),
])
def test_invalid_arguments(kwargs, error, match):
    args = dict(points=torch.ones(4, 3), threshold=0.5)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        connected_components(**args)


def test_raw_op_validates_in_cpp():
    with pytest.raises(RuntimeError, match='class_ids contains [-0-9]+, expected values in'):
        torch.ops.fsdlite.connected_components(torch.zeros(3, 2), torch.tensor([0.5, 0.5], dtype=torch.float64),
                                               None, torch.tensor([0, 5, 1]), 2, True)
    with pytest.raises(RuntimeError, match='ndim must be 2'):
        torch.ops.fsdlite.connected_components(torch.zeros(3, 2), torch.tensor([0.5]), None, None, 4, False)
    with pytest.raises(RuntimeError, match='finite values'):
        torch.ops.fsdlite.connected_components(torch.full((3, 2), float('inf')), torch.tensor([0.5]), None, None, 2,
                                               False)


# ------------------------------------------------------------------------------------------ CUDA
@pytest.mark.cuda
@pytest.mark.parametrize('metric', ['xy', 'xyz'])
def test_cuda_matches_cpu(metric):
    points = clustered_points(20000, 9, extent=60.0, clusters=200, spread=0.3)
    points = torch.cat([points, points[:500]])  # duplicates
    g = torch.Generator().manual_seed(9)
    classes = torch.randint(0, 3, (len(points),), generator=g)
    batch = torch.randint(0, 2, (len(points),), generator=g)
    thr = torch.tensor([0.6, 0.1, 0.0])
    cpu = connected_components(points, thr, batch=batch, class_ids=classes, metric=metric)
    gpu = connected_components(points.cuda(), thr.cuda(), batch=batch.cuda(), class_ids=classes.cuda(), metric=metric)
    assert gpu[1] == cpu[1]
    assert torch.equal(gpu[0].cpu(), cpu[0])


@pytest.mark.cuda
def test_cuda_exact_ties_and_empty():
    coords = torch.randint(-8, 8, (3000, 3), generator=torch.Generator().manual_seed(10)).float() * 0.25
    for t in (0.25, 0.5, 0.75):
        assert torch.equal(connected_components(coords.cuda(), t)[0].cpu(), connected_components(coords, t)[0])
    labels, num = connected_components(torch.zeros(0, 3, device='cuda'), 0.5)
    assert num == 0 and labels.device.type == 'cuda'
    torch.library.opcheck(torch.ops.fsdlite.connected_components.default,
                          (coords[:50].cuda(), torch.tensor([0.5], dtype=torch.float64, device='cuda'), None, None,
                           3, False))
