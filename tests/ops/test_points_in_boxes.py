"""points_in_boxes / points_in_boxes_all: real data, reference, properties, opcheck, invalid inputs.

Real data: shared/data/kitti_object_000008 (open-mmlab/mmdetection3d@fe25f7a:demo/data/kitti/000008.*)
and shared/data/nuscenes_demo (open-mmlab/mmdetection3d@fe25f7a:demo/data/nuscenes/*).
"""
import math
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.ops import count_points_in_boxes, points_in_boxes, points_in_boxes_all
from fsdlite.ops.points_in_boxes.reference import points_in_boxes_all_reference, points_in_boxes_reference
from fsdlite.structures.boxes import camera_to_lidar_boxes, gravity_to_bottom, rotate_boxes

KITTI_COUNTS = [1325, 1900, 881, 659, 55, 162]
KITTI_LIDAR_BOXES = [  # data.md table (4 decimals)
    [3.9703, 2.7167, -1.7451, 3.23, 1.57, 1.60, -0.2808],
    [8.1494, 1.1864, -1.6276, 3.68, 1.50, 1.57, -3.4708 + 2 * math.pi],
    [6.4406, -3.7937, -1.6881, 3.08, 1.44, 1.39, -0.2608],
    [14.7286, -1.0537, -1.4825, 3.66, 1.60, 1.47, -0.3208],
    [33.4890, -7.2211, -1.3516, 4.08, 1.63, 1.70, -3.5208 + 2 * math.pi],
    [20.2521, -8.4605, -1.7031, 2.47, 1.59, 1.59, -0.3208],
]
SETTINGS = settings(max_examples=40, deadline=None)


def kitti_000008(shared_data):
    folder = shared_data / 'kitti_object_000008'
    points = torch.from_numpy(np.fromfile(folder / '000008.bin', np.float32).reshape(-1, 4))
    info = pickle.load(open(folder / '000008.pkl', 'rb'))['data_list'][0]
    lidar2cam = np.array(info['images']['R0_rect']) @ np.array(info['lidar_points']['Tr_velo_to_cam'])
    cars = [ins['bbox_3d'] for ins in info['instances'] if ins['bbox_label_3d'] >= 0]
    boxes = camera_to_lidar_boxes(torch.tensor(cars, dtype=torch.float64), lidar2cam).float()
    return points, boxes


def random_scene(seed, n=300, m=12, batches=3, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(n, 4, generator=g, dtype=torch.float64) * torch.tensor([20, 20, 4, 1.0]) - \
        torch.tensor([10, 10, 2, 0.0])
    boxes = torch.rand(m, 7, generator=g, dtype=torch.float64) * torch.tensor([20, 20, 1, 6, 4, 3, 7.0]) - \
        torch.tensor([10, 10, 1.5, -0.2, -0.2, -0.2, 3.5])
    pb = torch.randint(0, batches, (n,), generator=g)
    bb = torch.randint(0, batches, (m,), generator=g)
    return points.to(dtype), boxes.to(dtype), pb, bb


# ----------------------------------------------------------------------------------------- real data
def test_kitti_000008_counts(shared_data):
    points, boxes = kitti_000008(shared_data)
    assert torch.allclose(boxes, torch.tensor(KITTI_LIDAR_BOXES), atol=2e-3)
    assert count_points_in_boxes(points, boxes).tolist() == KITTI_COUNTS
    idx = points_in_boxes(points, boxes)
    assert torch.bincount(idx[idx >= 0], minlength=6).tolist() == KITTI_COUNTS  # the cars do not overlap
    assert torch.equal(idx, points_in_boxes_reference(points, boxes))


def test_nuscenes_demo_counts(shared_data):
    folder = shared_data / 'nuscenes_demo'
    points = torch.from_numpy(np.fromfile(folder / 'LIDAR_TOP_1532402927647951.pcd.bin', np.float32).reshape(-1, 5))
    instances = pickle.load(open(folder / 'infos.pkl', 'rb'))['data_list'][0]['instances']
    boxes = torch.tensor(np.array([ins['bbox_3d'] for ins in instances]), dtype=torch.float64)
    stored = torch.tensor([int(ins['num_lidar_pts']) for ins in instances])
    counts = count_points_in_boxes(points, boxes.float(), box_origin='center')
    exact = counts == stored
    assert int(exact.sum()) >= 61, f'only {int(exact.sum())} of {len(stored)} counts exact'
    diff = (counts - stored).abs()
    assert bool((diff <= torch.clamp(stored // 10, min=2)).all()), list(zip(counts.tolist(), stored.tolist()))
    # the same boxes with a bottom-centre z give the same membership
    bottom = count_points_in_boxes(points, gravity_to_bottom(boxes), box_origin='bottom')
    assert torch.equal(bottom, count_points_in_boxes(points, boxes, box_origin='center'))


# ----------------------------------------------------------------------------------------- reference
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize('box_origin', ['bottom', 'center'])
def test_matches_reference_batched(dtype, box_origin):
    points, boxes, pb, bb = random_scene(0, dtype=dtype)
    expected_all = points_in_boxes_all_reference(points, boxes, pb, bb, box_origin)
    assert expected_all.any(), 'scene should put points in boxes'
    assert torch.equal(points_in_boxes_all(points, boxes, pb, bb, box_origin), expected_all)
    assert torch.equal(points_in_boxes(points, boxes, pb, bb, box_origin),
                       points_in_boxes_reference(points, boxes, pb, bb, box_origin))


def test_batch_separates_samples():
    points = torch.tensor([[0.0, 0.0, 0.5], [0.0, 0.0, 0.5], [5.0, 0.0, 0.5]])
    boxes = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0.0], [5.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0.0]])
    # point 1 is geometrically in box 0 but belongs to sample 7, whose only box is box 1
    pb, bb = torch.tensor([0, 7, 7]), torch.tensor([0, 7])
    assert points_in_boxes(points, boxes, pb, bb).tolist() == [0, -1, 1]
    assert points_in_boxes(points, boxes).tolist() == [0, 0, 1]
    assert points_in_boxes(points, boxes, pb.int(), bb.int()).tolist() == [0, -1, 1]


def test_first_box_wins_and_all_marks_every_box():
    points = torch.tensor([[0.5, 0.0, 0.5], [1.5, 0.0, 0.5], [9.0, 9.0, 0.5]])
    boxes = torch.tensor([[1.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0.0],   # contains points 0 and 1 (x in (0, 2))
                          [0.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0.0],   # contains point 0 only
                          [1.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0.0]])  # duplicate of box 0
    assert points_in_boxes(points, boxes).tolist() == [0, 0, -1]
    assert points_in_boxes(points, boxes.flip(0)).tolist() == [0, 0, -1]
    assert points_in_boxes_all(points, boxes).tolist() == [[True, True, True], [True, False, True],
                                                           [False, False, False]]


def test_non_finite_points_are_in_no_box():
    boxes = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 1.0, 0.0]])
    points = torch.tensor([[float('nan'), 0.0, 0.5], [0.0, float('inf'), 0.5], [0.0, 0.0, float('nan')]])
    assert points_in_boxes(points, boxes).tolist() == [-1, -1, -1]


@pytest.mark.parametrize('n,m', [(0, 0), (0, 3), (4, 0)])
def test_empty_inputs(n, m):
    points, boxes = torch.zeros(n, 3), torch.ones(m, 7)
    assert points_in_boxes(points, boxes).shape == (n,)
    assert points_in_boxes(points, boxes).dtype == torch.long
    assert points_in_boxes_all(points, boxes).shape == (n, m)
    assert (points_in_boxes(points, boxes) == -1).all()


# ----------------------------------------------------------------------------------------- properties
@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(0, 60), m=st.integers(0, 8), batches=st.integers(1, 3),
       origin=st.sampled_from(['bottom', 'center']))
def test_property_matches_reference(seed, n, m, batches, origin):
    points, boxes, pb, bb = random_scene(seed, n, m, batches)
    if n > 1:  # duplicate points get identical answers
        points[-1] = points[0]
        pb[-1] = pb[0]
    got = points_in_boxes(points, boxes, pb, bb, origin)
    assert torch.equal(got, points_in_boxes_reference(points, boxes, pb, bb, origin))
    assert torch.equal(points_in_boxes_all(points, boxes, pb, bb, origin),
                       points_in_boxes_all_reference(points, boxes, pb, bb, origin))
    if n > 1:
        assert got[-1] == got[0]


@SETTINGS
@given(centre=st.tuples(st.integers(-8, 8), st.integers(-8, 8), st.integers(-3, 3)),
       half=st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 6)),
       origin=st.sampled_from(['bottom', 'center']))
def test_property_points_on_faces(centre, half, origin):
    """Axis-aligned box with exactly representable faces: side faces exclude, top/bottom faces include."""
    cx, cy, cz = (float(c) for c in centre)
    hl, hw, hh = (h * 0.5 for h in half)
    z0 = cz if origin == 'bottom' else cz - hh
    box = torch.tensor([[cx, cy, cz, 2 * hl, 2 * hw, 2 * hh, 0.0]])
    zm = z0 + hh
    points = torch.tensor([
        [cx, cy, zm],              # centre: inside
        [cx + hl, cy, zm], [cx - hl, cy, zm], [cx, cy + hw, zm], [cx, cy - hw, zm],  # side faces: outside
        [cx, cy, z0], [cx, cy, z0 + 2 * hh],                                        # bottom/top: inside
        [cx + hl - 0.25, cy + hw - 0.25, z0 + 2 * hh],                              # top, near corner: inside
        [cx, cy, z0 - 0.25], [cx, cy, z0 + 2 * hh + 0.25],                          # below/above: outside
    ])
    expected = [0, -1, -1, -1, -1, 0, 0, 0, -1, -1]
    assert points_in_boxes(points, box, box_origin=origin).tolist() == expected
    assert points_in_boxes(points.double(), box.double(), box_origin=origin).tolist() == expected


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), quarter_turns=st.integers(1, 3), n=st.integers(0, 80),
       m=st.integers(0, 6))
def test_property_rotation_by_90_degrees(seed, quarter_turns, n, m):
    """Rotating points and boxes together by k*90 deg keeps membership (points kept 0.25 m off faces)."""
    g = torch.Generator().manual_seed(seed)
    points = torch.randint(-10, 11, (n, 3), generator=g).double()
    centre = torch.randint(-8, 9, (m, 3), generator=g).double()
    sizes = torch.randint(0, 5, (m, 3), generator=g).double() * 2 + 1.5  # faces at +-(k + 0.75)
    yaw = torch.randint(0, 4, (m, 1), generator=g).double() * (math.pi / 2)
    boxes = torch.cat([centre, sizes, yaw], dim=1)
    boxes[:, 2] -= 0.25  # bottom faces at integer - 0.25
    before = points_in_boxes_all(points, boxes)
    rotated = points.clone()
    for _ in range(quarter_turns):  # exact: (x, y) -> (-y, x)
        rotated = torch.stack([-rotated[:, 1], rotated[:, 0], rotated[:, 2]], dim=1)
    after = points_in_boxes_all(rotated, rotate_boxes(boxes, quarter_turns * math.pi / 2))
    assert torch.equal(before, after)


def test_points_just_inside_corners_survive_the_early_reject():
    """The circumscribed-circle early reject never drops a point that the exact test keeps."""
    from fsdlite.structures.boxes import box_corners
    boxes = torch.tensor([[3.0, -2.0, -1.7, 4.2, 1.7, 1.5, 0.7], [20.0, 5.0, -1.7, 0.8, 0.6, 1.8, -2.9]],
                         dtype=torch.float64)
    corners = box_corners(boxes)[:, :4]  # bottom corners
    centre = boxes[:, None, :3]
    mid_height = torch.tensor([0.0, 0.0, 0.75], dtype=torch.float64)
    for eps, expected in ((1e-6, True), (-1e-6, False), (1e-12, None), (-1e-12, None)):
        points = (centre + (corners - centre) * (1 - eps) + mid_height).reshape(-1, 3)
        got = points_in_boxes_all(points, boxes)
        assert torch.equal(got, points_in_boxes_all_reference(points, boxes))
        if expected is not None:
            owner = torch.arange(2).repeat_interleave(4)
            assert bool((got[torch.arange(8), owner] == expected).all())


# ----------------------------------------------------------------------------------------- opcheck
@pytest.mark.parametrize('batched', [False, True])
@pytest.mark.parametrize('op', ['points_in_boxes', 'points_in_boxes_all'])
def test_opcheck(op, batched):
    points, boxes, pb, bb = random_scene(1, n=50, m=5)
    args = (points, boxes, pb if batched else None, bb if batched else None, 'bottom')
    torch.library.opcheck(getattr(torch.ops.fsdlite, op).default, args)


# ----------------------------------------------------------------------------------------- invalid inputs
BOX = torch.zeros(2, 7)
PTS = torch.zeros(3, 3)


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(points=PTS.long()), TypeError, 'points must be a floating-point tensor'),
    (dict(points=[[0.0, 0.0, 0.0]]), TypeError, 'points must be a torch.Tensor'),
    (dict(points=torch.zeros(3, 2)), ValueError, r'points must have shape \(N, >=3\)'),
    (dict(points=torch.zeros(3)), ValueError, 'points must be 2-D'),
    (dict(boxes=torch.zeros(2, 6)), ValueError, r'boxes.shape\[1\] must be 7'),
    (dict(boxes=BOX.int()), TypeError, 'boxes must be a floating-point tensor'),
    (dict(box_origin='gravity'), ValueError, "box_origin must be one of.*'gravity'"),
    (dict(point_batch=torch.zeros(3, dtype=torch.long)), ValueError, 'given together, got only point_batch'),
    (dict(point_batch=torch.zeros(2, dtype=torch.long), box_batch=torch.zeros(2, dtype=torch.long)), ValueError,
     r'point_batch.shape\[0\] must be 3'),
    (dict(point_batch=torch.zeros(3), box_batch=torch.zeros(2)), TypeError, 'point_batch must have one of the dtypes'),
    (dict(point_batch=torch.tensor([0, -1, 0]), box_batch=torch.zeros(2, dtype=torch.long)), RuntimeError,
     r'point_batch contains -1'),  # checked once, by the C++ op
    (dict(point_batch=torch.zeros(3, dtype=torch.long), box_batch=torch.zeros(2, dtype=torch.long, device='meta')),
     ValueError, 'one device'),
])
@pytest.mark.parametrize('fn', [points_in_boxes, points_in_boxes_all])
def test_invalid_inputs_raise(fn, kwargs, error, match):
    args = dict(points=PTS, boxes=BOX)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        fn(**args)


@pytest.mark.parametrize('args,match', [
    ((torch.zeros(3, 2), BOX, None, None, 'bottom'), r'points must have shape \(N, >=3\)'),
    ((PTS, torch.zeros(2, 5), None, None, 'bottom'), 'boxes.size\\(1\\) must equal 7'),
    ((PTS, BOX, torch.zeros(3, dtype=torch.long), None, 'bottom'), 'must be given together'),
    ((PTS, BOX, torch.tensor([0, 0, -5]), torch.zeros(2, dtype=torch.long), 'bottom'), 'point_batch contains -5'),
    ((PTS, BOX, torch.zeros(3, dtype=torch.int32), torch.zeros(2, dtype=torch.int32), 'bottom'), 'dtype Long'),
    ((PTS, BOX, None, None, 'top'), "box_origin must be 'bottom' or 'center'"),
    ((PTS.long(), BOX, None, None, 'bottom'), 'points must be a floating-point tensor'),
])
def test_kernel_validates_before_running(args, match):
    """The C++ op itself rejects bad arguments (callers bypassing the Python wrapper cannot crash it)."""
    for op in (torch.ops.fsdlite.points_in_boxes, torch.ops.fsdlite.points_in_boxes_all):
        with pytest.raises(RuntimeError, match=match):
            op(*args)


# ----------------------------------------------------------------------------------------- CUDA
@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_cuda_matches_cpu(dtype):
    points, boxes, pb, bb = random_scene(2, n=5000, m=40, batches=4, dtype=dtype)
    for origin in ('bottom', 'center'):
        cpu = points_in_boxes(points, boxes, pb, bb, origin)
        gpu = points_in_boxes(points.cuda(), boxes.cuda(), pb.cuda(), bb.cuda(), origin)
        assert torch.equal(gpu.cpu(), cpu)
        cpu_all = points_in_boxes_all(points, boxes, pb, bb, origin)
        gpu_all = points_in_boxes_all(points.cuda(), boxes.cuda(), pb.cuda(), bb.cuda(), origin)
        assert torch.equal(gpu_all.cpu(), cpu_all)
    assert points_in_boxes(points[:0].cuda(), boxes.cuda()).shape == (0,)
    assert points_in_boxes_all(points.cuda(), boxes[:0].cuda()).shape == (5000, 0)


@pytest.mark.cuda
def test_cuda_kitti_counts_and_opcheck(shared_data):
    points, boxes = kitti_000008(shared_data)
    assert count_points_in_boxes(points.cuda(), boxes.cuda()).cpu().tolist() == KITTI_COUNTS
    torch.library.opcheck(torch.ops.fsdlite.points_in_boxes.default,
                          (points[:500].cuda(), boxes.cuda(), None, None, 'bottom'))
