"""grid_subsample: reference equality, a NumPy per-cell oracle, properties (duplicates, label ties,
empty input), gradients of the means, opcheck (dynamic size), invalid inputs, S3DIS and KITTI."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.ops import grid_subsample
from fsdlite.ops.grid_subsample.reference import grid_subsample_reference


def assert_same(got, want):
    for name, a, b in zip(got._fields, got, want):
        if a is None or b is None:
            assert a is None and b is None, name
        else:
            assert a.dtype == b.dtype and torch.equal(a, b), name


def numpy_oracle(points, voxel, batch, labels):
    """Dict keyed by (sample, cell key) -> (first point, barycentre, majority label); a plain loop."""
    cells = {}
    for i, p in enumerate(points):
        key = (int(batch[i]),) + tuple(int(v) for v in np.floor(p.astype(np.float64) / voxel))
        cells.setdefault(key, []).append(i)
    out = {}
    for key, members in cells.items():
        values, counts = np.unique(labels[members], return_counts=True)
        out[key] = (members[0], points[members].astype(np.float64).mean(0), values[np.argmax(counts)])
    return out


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_matches_reference(dtype):
    gen = torch.Generator().manual_seed(0)
    n = 3000
    points = (torch.rand(n, 3, generator=gen, dtype=dtype) - 0.5) * 6  # negative coordinates too
    batch = torch.sort(torch.randint(0, 4, (n,), generator=gen)).values
    features = torch.randn(n, 6, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 5, (n,), generator=gen)
    for voxel in (0.5, [0.3, 0.7, 1.1]):
        size = voxel if isinstance(voxel, list) else [voxel] * 3
        assert_same(grid_subsample(points, voxel, batch, features, labels),
                    grid_subsample_reference(points, size, batch, features, labels))
    assert_same(grid_subsample(points, 0.4), grid_subsample_reference(points, [0.4] * 3))


def test_matches_numpy_oracle():
    gen = torch.Generator().manual_seed(1)
    n = 800
    points = torch.rand(n, 3, generator=gen) * 3
    batch = torch.sort(torch.randint(0, 3, (n,), generator=gen)).values
    labels = torch.randint(0, 3, (n,), generator=gen)
    res = grid_subsample(points, 0.6, batch, labels=labels)
    oracle = numpy_oracle(points.numpy(), 0.6, batch.numpy(), labels.numpy())
    assert len(oracle) == len(res.points)
    firsts = sorted(v[0] for v in oracle.values())
    by_first = {v[0]: v for v in oracle.values()}
    for row, first in enumerate(firsts):  # rows ordered by first point
        _, centre, label = by_first[first]
        np.testing.assert_allclose(res.points[row].numpy(), centre, rtol=1e-6, atol=1e-6)
        assert res.labels[row] == label and res.batch[row] == batch[first] and res.cell[first] == row


def test_cells_and_pooling_semantics():
    points = torch.tensor([[0.1, 0.1, 0.1], [5.0, 5.0, 5.0], [0.3, 0.2, 0.4], [0.9, 0.0, 0.0], [0.1, 0.1, 0.1]])
    labels = torch.tensor([4, 1, 2, 7, 2])
    features = torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0]])
    res = grid_subsample(points, 1.0, features=features, labels=labels)
    assert res.cell.tolist() == [0, 1, 0, 0, 0]
    assert res.labels.tolist() == [2, 1]  # label 2 twice beats 4 and 7
    torch.testing.assert_close(res.features, torch.tensor([[13.0 / 4], [2.0]]))
    torch.testing.assert_close(res.points[0], points[[0, 2, 3, 4]].mean(0))
    assert res.batch.tolist() == [0, 0]
    tie = grid_subsample(points[:4], 1.0, labels=torch.tensor([9, 0, 3, 5])).labels
    assert tie.tolist() == [3, 0]  # three labels once each: smallest wins
    # negative coordinates floor away from zero: -0.1 and 0.1 are in different cells
    assert grid_subsample(torch.tensor([[-0.1, 0.0, 0.0], [0.1, 0.0, 0.0]]), 1.0).cell.tolist() == [0, 1]


def test_same_cell_in_two_samples_stays_apart():
    points = torch.zeros(4, 3)
    res = grid_subsample(points, 1.0, batch=torch.tensor([0, 0, 3, 3]))
    assert res.cell.tolist() == [0, 0, 1, 1] and res.batch.tolist() == [0, 3]


def test_empty_input():
    res = grid_subsample(torch.zeros(0, 3), 0.1, torch.zeros(0, dtype=torch.long), torch.zeros(0, 4),
                         torch.zeros(0, dtype=torch.long))
    assert res.points.shape == (0, 3) and res.features.shape == (0, 4) and res.labels.shape == (0,)
    assert res.cell.shape == (0,) and res.batch.shape == (0,)


@st.composite
def clouds(draw):
    n = draw(st.integers(0, 40))
    coords = st.sampled_from([-1.5, -1.0, -0.25, 0.0, 0.25, 0.5, 0.99, 1.0, 2.0])  # duplicates, cell borders
    pts = torch.tensor(draw(st.lists(st.lists(coords, min_size=3, max_size=3), min_size=n, max_size=n)),
                       dtype=torch.float64).reshape(n, 3)
    batch = torch.tensor(sorted(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))), dtype=torch.long)
    labels = torch.tensor(draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n)), dtype=torch.long)
    return pts, draw(st.sampled_from([0.5, 1.0, 0.3])), batch, labels


@settings(max_examples=60, deadline=None)
@given(clouds())
def test_property_matches_reference(cloud):
    points, voxel, batch, labels = cloud
    features = points * 2 + 1
    res = grid_subsample(points, voxel, batch, features, labels)
    assert_same(res, grid_subsample_reference(points, [voxel] * 3, batch, features, labels))
    m = res.points.shape[0]
    assert m == 0 or torch.equal(torch.bincount(res.cell, minlength=m) > 0, torch.ones(m, dtype=torch.bool))
    if m:  # rows ordered by first point, batch ids sorted, pooling-unpooling keeps the cell
        first = torch.full((m,), len(points)).scatter_reduce(0, res.cell, torch.arange(len(points)), 'amin')
        assert (first[1:] > first[:-1]).all() and (res.batch[1:] >= res.batch[:-1]).all()
        assert torch.equal(res.batch[res.cell], batch)
        assert torch.equal(torch.floor(res.points[res.cell] / voxel), torch.floor(points / voxel))


def test_gradients_of_means():
    gen = torch.Generator().manual_seed(2)
    points = (torch.rand(30, 3, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    features = torch.randn(30, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    batch = torch.tensor([0] * 14 + [1] * 16)

    def pooled(p, f):
        res = grid_subsample(p, 0.8, batch, f)
        return res.points, res.features

    assert torch.autograd.gradcheck(pooled, (points, features))
    assert torch.autograd.gradcheck(lambda p: grid_subsample(p, 0.8).points, (points,))


def test_opcheck():
    gen = torch.Generator().manual_seed(3)
    points = torch.rand(40, 3, generator=gen, dtype=torch.float64) * 2
    op = torch.ops.fsdlite.grid_subsample.default
    batch = torch.tensor([0] * 20 + [1] * 20)
    torch.library.opcheck(op, (points, [0.5, 0.5, 0.5]))
    torch.library.opcheck(op, (points, [0.5, 0.4, 0.6], batch, torch.randn(40, 3, generator=gen),
                               torch.randint(0, 3, (40,), generator=gen)))
    torch.library.opcheck(op, (points.clone().requires_grad_(), [0.5] * 3, batch,
                               torch.randn(40, 2, dtype=torch.float64, generator=gen).requires_grad_()))


@pytest.mark.parametrize('call, error, match', [
    (lambda p: grid_subsample(p.long(), 0.1), TypeError, 'points must have one of the dtypes'),
    (lambda p: grid_subsample(p[:, :2], 0.1), ValueError, r'points.shape\[1\] must be 3'),
    (lambda p: grid_subsample(p, 0.0), ValueError, 'voxel_size must be finite and > 0'),
    (lambda p: grid_subsample(p, float('nan')), ValueError, 'voxel_size must be finite'),
    (lambda p: grid_subsample(p, [0.1, 0.1]), ValueError, 'voxel_size must be a number or 3 numbers'),
    (lambda p: grid_subsample(p, [0.1, -1.0, 0.1]), ValueError, 'voxel_size must be finite and > 0'),
    (lambda p: grid_subsample(p, 'big'), TypeError, 'voxel_size must be a number'),
    (lambda p: grid_subsample(p.index_fill(0, torch.tensor([1]), float('nan')), 0.1), RuntimeError,
     'points must contain only finite values, got nan'),  # values: checked once, by the C++ op
    (lambda p: grid_subsample(p, 0.1, torch.tensor([0, 2, 1, 3, 4])), RuntimeError,
     r'batch must be sorted non-decreasing.*got batch\[1\]=2 > batch\[2\]=1'),
    (lambda p: grid_subsample(p, 0.1, torch.zeros(4, dtype=torch.long)), ValueError, r'batch.shape\[0\] must be 5'),
    (lambda p: grid_subsample(p, 0.1, features=torch.zeros(5, 2, dtype=torch.long)), TypeError, 'features must have'),
    (lambda p: grid_subsample(p, 0.1, features=torch.zeros(5)), ValueError, 'features must be 2-D'),
    (lambda p: grid_subsample(p, 0.1, labels=torch.zeros(5)), TypeError, 'labels must have one of the dtypes'),
    (lambda p: grid_subsample(p, 0.1, labels=torch.zeros(6, dtype=torch.long)), ValueError, r'labels.shape\[0\]'),
    (lambda p: grid_subsample(p * 1e30, 1e-3), RuntimeError, r'points\[:, 0\] reaches'),
    (lambda p: grid_subsample(p, 0.1, torch.zeros(5, dtype=torch.long, device='meta')), ValueError,
     'all tensors must be on one device, got points on cpu, batch on meta'),
    (lambda p: grid_subsample(p.to('meta'), 0.1, torch.zeros(5, dtype=torch.long)), ValueError,
     'all tensors must be on one device, got points on meta, batch on cpu'),
])
def test_invalid_inputs_raise(call, error, match):
    p = torch.rand(5, 3) + 0.1
    with pytest.raises(error, match=match):
        call(p)


def test_kernel_validates_before_running():
    op = torch.ops.fsdlite.grid_subsample
    with pytest.raises(RuntimeError, match='voxel_size must have 3 values'):
        op(torch.rand(4, 3), [0.1, 0.1])
    with pytest.raises(RuntimeError, match='voxel_size values must be finite and > 0'):
        op(torch.rand(4, 3), [0.1, 0.0, 0.1])
    with pytest.raises(RuntimeError, match='labels must have dtype'):
        op(torch.rand(4, 3), [0.1] * 3, None, None, torch.zeros(4, dtype=torch.int32))
    with pytest.raises(RuntimeError, match='batch must be sorted'):
        op(torch.rand(4, 3), [0.1] * 3, torch.tensor([1, 0, 0, 0]))


def test_s3dis_subset(shared_data):
    """S3DIS Area 5 conferenceRoom_1 subset (DERIVED from SysCV/vis4d-test-data@8e92136), 246,417 points."""
    data = np.load(shared_data / 's3dis_area5_conf1' / 'area5_conferenceRoom_1_subset.npz')
    xyz = torch.from_numpy(data['xyz'])
    labels = torch.from_numpy(data['sem_label'].astype(np.int64))
    rgb = torch.from_numpy(data['rgb'].astype(np.float32)) / 255
    res = grid_subsample(xyz, 0.04, features=rgb, labels=labels)
    assert_same(res, grid_subsample_reference(xyz, [0.04] * 3, features=rgb, labels=labels))
    assert 0 < len(res.points) < len(xyz)
    assert torch.equal(torch.bincount(res.labels, minlength=13) > 0, torch.bincount(labels, minlength=13) > 0)
    # the grid really bounds the pooled points: every barycentre lies in its members' cell
    assert torch.equal(torch.floor(res.points.double()[res.cell] / 0.04), torch.floor(xyz.double() / 0.04))
    # two stacked copies (a batch of 2) pool each copy independently
    both = grid_subsample(torch.cat([xyz, xyz]), 0.04, batch=torch.arange(2).repeat_interleave(len(xyz)))
    assert len(both.points) == 2 * len(res.points)


def test_kitti_frame(shared_data):
    """KITTI object frame 000008 (mmdetection3d@fe25f7a:demo/data/kitti/000008.bin)."""
    pts = np.fromfile(shared_data / 'kitti_object_000008' / '000008.bin', np.float32).reshape(-1, 4)
    xyz, intensity = torch.from_numpy(pts[:, :3]), torch.from_numpy(pts[:, 3:])
    res = grid_subsample(xyz, [0.2, 0.2, 0.1], features=intensity)
    assert_same(res, grid_subsample_reference(xyz, [0.2, 0.2, 0.1], features=intensity))
    counts = torch.bincount(res.cell).double()
    # mean * count summed over cells gives back the total intensity
    torch.testing.assert_close((res.features.double()[:, 0] * counts).sum(), intensity.double().sum(),
                               rtol=1e-6, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_cuda_matches_cpu(dtype):
    gen = torch.Generator().manual_seed(4)
    n = 5000
    points = (torch.rand(n, 3, generator=gen, dtype=dtype) - 0.5) * 8
    batch = torch.sort(torch.randint(0, 3, (n,), generator=gen)).values
    features = torch.randn(n, 5, generator=gen, dtype=dtype)
    labels = torch.randint(0, 4, (n,), generator=gen)
    want = grid_subsample(points, 0.5, batch, features, labels)
    got = grid_subsample(points.cuda(), 0.5, batch.cuda(), features.cuda(), labels.cuda())
    for name in ('batch', 'labels', 'cell'):
        assert torch.equal(getattr(got, name).cpu(), getattr(want, name)), name
    torch.testing.assert_close(got.points.cpu(), want.points)
    torch.testing.assert_close(got.features.cpu(), want.features)
    empty = grid_subsample(torch.zeros(0, 3, device='cuda'), 0.1, features=torch.zeros(0, 2, device='cuda'))
    assert empty.points.shape == (0, 3) and empty.features.shape == (0, 2) and empty.cell.shape == (0,)
