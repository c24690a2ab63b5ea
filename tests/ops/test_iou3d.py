"""iou3d: BEV IoU (rotated / axis-aligned) and NMS against hand cases, a Monte Carlo area estimate,
the numpy polygon-clipping reference, real KITTI/nuScenes boxes, hypothesis properties, opcheck,
invalid inputs and CUDA vs CPU."""
import math
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fsdlite.ops import batched_nms_bev, boxes_iou_bev, boxes_iou_bev_aligned, nms_bev, nms_bev_aligned
from fsdlite.ops.iou3d.reference import boxes_iou_bev_reference, nms_bev_reference

SETTINGS = settings(max_examples=30, deadline=None)
F64 = torch.float64


def box(x, y, l, w, yaw=0.0, z=0.0, h=1.0):
    return [x, y, z, l, w, h, yaw]


def boxes(*rows, dtype=F64):
    return torch.tensor(rows, dtype=dtype).reshape(-1, 7)


def random_boxes(n, seed, extent=20.0, size=(0.2, 5.0), dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * extent
    lw = size[0] + torch.rand(n, 2, generator=g) * (size[1] - size[0])
    yaw = (torch.rand(n, 1, generator=g) - 0.5) * 4 * math.pi
    return torch.cat([xy, torch.randn(n, 1, generator=g), lw, torch.ones(n, 1), yaw], 1).to(dtype)


def clustered_boxes(n, seed, clusters=15, extent=30.0, dtype=torch.float32):
    """Detections around a few objects: jittered copies, as NMS sees them."""
    g = torch.Generator().manual_seed(seed)
    base = random_boxes(clusters, seed, extent=extent, size=(1.0, 4.5), dtype=F64)
    pick = torch.randint(0, clusters, (n,), generator=g)
    jitter = torch.randn(n, 7, generator=g, dtype=F64) * torch.tensor([0.3, 0.3, 0.1, 0.2, 0.1, 0.1, 0.2], dtype=F64)
    out = base[pick] + jitter
    out[:, 3:5] = out[:, 3:5].abs()
    return out.to(dtype)


def monte_carlo_iou(a, b, grid=400):
    """IoU from a midpoint grid over box a's footprint tested against box b (points-in-box rule)."""
    x, y, _, l, w, _, yaw = [float(v) for v in a]
    u = (torch.arange(grid, dtype=F64) + 0.5) / grid - 0.5
    lu, lv = torch.meshgrid(u * l, u * w, indexing='ij')
    px = x + math.cos(yaw) * lu - math.sin(yaw) * lv
    py = y + math.sin(yaw) * lu + math.cos(yaw) * lv
    bx, by, _, bl, bw, _, byaw = [float(v) for v in b]
    dx, dy = px - bx, py - by
    local_x = math.cos(byaw) * dx + math.sin(byaw) * dy
    local_y = -math.sin(byaw) * dx + math.cos(byaw) * dy
    inside = (local_x.abs() < bl / 2) & (local_y.abs() < bw / 2)
    inter = float(inside.double().mean()) * l * w
    union = l * w + bl * bw - inter
    return inter / union if union > 0 else 0.0


# ------------------------------------------------------------------------------------------ IoU hand cases
def test_hand_cases_rotated():
    sq = box(0, 0, 2, 2)
    cases = [
        (sq, sq, 1.0),                                              # identical
        (sq, box(10, 10, 2, 2), 0.0),                               # disjoint
        (sq, box(2, 0, 2, 2), 0.0),                                 # touching edges
        (sq, box(2, 2, 2, 2), 0.0),                                 # touching corners
        (sq, box(0, 0, 2, 2, math.pi / 2), 1.0),                    # 90 degree rotation of a square
        (sq, box(0, 0, 2, 2, -3 * math.pi / 2), 1.0),
        (box(0, 0, 4, 2), box(0, 0, 4, 2, math.pi), 1.0),           # 180 degrees
        (box(0, 0, 4, 2), box(0, 0, 4, 2, math.pi / 2), 4 / 12),    # cross: 2x2 core
        (sq, box(1, 0, 2, 2), 2 / 6),                               # half shift
        (sq, box(0, 0, 2, 2, math.pi / 4), 1 / math.sqrt(2)),       # octagon
        (box(0, 0, 4, 4), box(0.5, -0.5, 1, 2, 0.3), 2 / 16),       # containment
        (sq, box(0, 0, 0, 0), 0.0),                                 # degenerate
        (box(0, 0, 0, 2), box(0, 0, 0, 2), 0.0),                    # both zero-area
        (box(0, 0, 2, 0, 0.4), box(0, 0, 2, 2), 0.0),
    ]
    a = boxes(*[c[0] for c in cases])
    b = boxes(*[c[1] for c in cases])
    expected = torch.tensor([c[2] for c in cases], dtype=F64)
    got = boxes_iou_bev(a, b).diagonal()
    ref = boxes_iou_bev_reference(a, b).diagonal()
    assert torch.allclose(got, expected, atol=1e-12, rtol=0)
    assert torch.allclose(ref, expected, atol=1e-12, rtol=0)
    assert not torch.isnan(boxes_iou_bev(a, b)).any()


def test_hand_cases_axis_aligned_ignore_yaw():
    a = boxes(box(0, 0, 4, 2, 0.7), box(0, 0, 2, 2), box(0, 0, 2, 2))
    b = boxes(box(0, 0, 4, 2, -1.2), box(1, 1, 2, 2, 0.3), box(2, 0, 2, 2))
    assert torch.allclose(boxes_iou_bev_aligned(a, b).diagonal(), torch.tensor([1.0, 1 / 7, 0.0], dtype=F64))
    assert torch.equal(boxes_iou_bev_aligned(a, b), boxes_iou_bev_reference(a, b, axis_aligned=True))


def test_monte_carlo_agreement():
    a = random_boxes(12, 1, extent=3.0, dtype=F64)
    b = random_boxes(12, 2, extent=3.0, dtype=F64)
    got = boxes_iou_bev(a, b).diagonal()
    mc = torch.tensor([monte_carlo_iou(a[i], b[i]) for i in range(12)], dtype=F64)
    assert (got > 0).sum() >= 4  # enough overlapping pairs to mean something
    assert torch.allclose(got, mc, atol=6e-3)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_matches_reference_random(dtype):
    a = random_boxes(300, 3, extent=15.0, dtype=dtype)
    b = random_boxes(200, 4, extent=15.0, dtype=dtype)
    got = boxes_iou_bev(a, b)
    assert got.dtype == dtype and got.shape == (300, 200)
    assert torch.allclose(got, boxes_iou_bev_reference(a, b), atol=1e-6 if dtype == torch.float32 else 1e-12)
    assert torch.allclose(boxes_iou_bev_aligned(a, b), boxes_iou_bev_reference(a, b, True), atol=1e-6)


def test_extra_columns_and_half_precision():
    a = random_boxes(40, 5, extent=5.0)
    wide = torch.cat([a, torch.randn(40, 2)], 1)
    assert torch.equal(boxes_iou_bev(wide, wide), boxes_iou_bev(a, a))
    half = boxes_iou_bev(a.half(), a.half())
    assert half.dtype == torch.float16
    assert torch.allclose(half.float(), boxes_iou_bev_reference(a.half().float(), a.half().float()).float(), atol=2e-3)


def test_empty_inputs():
    a = random_boxes(3, 6)
    assert boxes_iou_bev(a, torch.zeros(0, 7)).shape == (3, 0)
    assert boxes_iou_bev(torch.zeros(0, 7), a).shape == (0, 3)
    assert nms_bev(torch.zeros(0, 7), torch.zeros(0), 0.5).shape == (0,)
    assert batched_nms_bev(torch.zeros(0, 7), torch.zeros(0), torch.zeros(0, dtype=torch.long), 0.5).shape == (0,)


def test_real_boxes_kitti_and_nuscenes(shared_data):
    # KITTI frame 8 cars in LiDAR frame (reference/data.md, from mmdetection3d@fe25f7a demo/data/kitti/000008.pkl).
    cars = torch.tensor([[3.9703, 2.7167, -1.7451, 3.23, 1.57, 1.60, -0.2808],
                         [8.1494, 1.1864, -1.6276, 3.68, 1.50, 1.57, -3.4708],
                         [6.4406, -3.7937, -1.6881, 3.08, 1.44, 1.39, -0.2608],
                         [14.7286, -1.0537, -1.4825, 3.66, 1.60, 1.47, -0.3208],
                         [33.4890, -7.2211, -1.3516, 4.08, 1.63, 1.70, -3.5208],
                         [20.2521, -8.4605, -1.7031, 2.47, 1.59, 1.59, -0.3208]])
    iou = boxes_iou_bev(cars, cars)
    assert torch.allclose(iou, torch.eye(6), atol=1e-6)  # parked cars do not overlap
    # nuScenes keyframe, 69 boxes (mmdetection3d@fe25f7a demo/data/nuscenes/*.pkl).
    with open(shared_data / 'nuscenes_demo' / 'infos.pkl', 'rb') as f:
        info = pickle.load(f)['data_list'][0]
    nus = torch.tensor(np.array([inst['bbox_3d'] for inst in info['instances']]), dtype=torch.float32)
    labels = torch.tensor([inst['bbox_label_3d'] for inst in info['instances']]) + 1  # -1 (ignored class) -> 0
    iou = boxes_iou_bev(nus, nus)
    assert torch.allclose(iou, boxes_iou_bev_reference(nus, nus), atol=1e-6)
    assert torch.allclose(iou.diagonal(), torch.ones(len(nus)))
    assert torch.allclose(iou, iou.T, atol=1e-6)
    # NMS of jittered lower-scored duplicates keeps exactly the annotated boxes.
    g = torch.Generator().manual_seed(0)
    dup = nus + torch.randn(nus.shape, generator=g) * torch.tensor([0.05, 0.05, 0, 0.03, 0.03, 0, 0.02])
    all_boxes = torch.cat([nus, dup])
    scores = torch.cat([torch.full((len(nus),), 0.9), torch.rand(len(nus), generator=g) * 0.5])
    keep = batched_nms_bev(all_boxes, scores, labels.repeat(2), 0.3)
    assert sorted(keep.tolist()) == list(range(len(nus)))


# ------------------------------------------------------------------------------------------ IoU properties
finite = st.floats(-50, 50, allow_nan=False, width=64)
# centres within 3 m of the origin, so that boxes of up to 6 m mostly overlap (with centres over +-50 m and half
# the sizes zero, 27 of the 30 drawn examples compared nothing but zero IoUs)
near = st.floats(-3, 3, allow_nan=False, width=64)
# >= 1 cm, or now and then exactly zero (degenerate): for slivers thinner than ~1e-12 m rounding noise rivals the
# area itself
sizes = st.integers(0, 4).flatmap(lambda i: st.floats(0.01, 6, allow_nan=False, width=64) if i else st.just(0.0))
proper_sizes = st.floats(0.1, 6, allow_nan=False, width=64)  # containment: no degenerate outer box to skip
angles = st.floats(-7, 7, allow_nan=False, width=64)
box_strategy = st.tuples(near, near, sizes, sizes, angles).map(lambda t: box(t[0], t[1], t[2], t[3], t[4]))


@SETTINGS
@given(a=st.lists(box_strategy, min_size=1, max_size=6), b=st.lists(box_strategy, min_size=1, max_size=6),
       angle=angles, shift=st.tuples(finite, finite))
def test_property_rigid_motion_symmetry_and_bounds(a, b, angle, shift):
    a, b = boxes(*a), boxes(*b)
    iou = boxes_iou_bev(a, b)
    assert not torch.isnan(iou).any() and (iou >= 0).all() and (iou <= 1).all()
    assert torch.allclose(iou, boxes_iou_bev(b, a).T, atol=1e-9)
    assert torch.allclose(iou, boxes_iou_bev_reference(a, b), atol=1e-9)

    def move(x):
        c, s = math.cos(angle), math.sin(angle)
        out = x.clone()
        out[:, 0] = c * x[:, 0] - s * x[:, 1] + shift[0]
        out[:, 1] = s * x[:, 0] + c * x[:, 1] + shift[1]
        out[:, 6] = x[:, 6] + angle
        return out

    assert torch.allclose(boxes_iou_bev(move(a), move(b)), iou, atol=1e-7)
    flipped = b.clone()
    flipped[:, 6] += math.pi
    assert torch.allclose(boxes_iou_bev(a, flipped), iou, atol=1e-9)


@SETTINGS
@given(outer=st.tuples(finite, finite, proper_sizes, proper_sizes, angles).map(lambda t: box(*t)),
       frac=st.tuples(st.floats(0.05, 1.0), st.floats(0.05, 1.0)), pos=st.tuples(st.floats(-1, 1), st.floats(-1, 1)))
def test_property_containment(outer, frac, pos):
    x, y, _, l, w, _, yaw = outer
    il, iw = l * frac[0], w * frac[1]
    ox, oy = pos[0] * (l - il) / 2, pos[1] * (w - iw) / 2  # inner box stays inside (local frame)
    inner = box(x + math.cos(yaw) * ox - math.sin(yaw) * oy, y + math.sin(yaw) * ox + math.cos(yaw) * oy, il, iw, yaw)
    iou = boxes_iou_bev(boxes(outer), boxes(inner))
    assert abs(float(iou) - frac[0] * frac[1]) < 1e-7


# ------------------------------------------------------------------------------------------ NMS
@pytest.mark.parametrize('threshold', [0.0, 0.1, 0.5])
@pytest.mark.parametrize('aligned', [False, True])
def test_nms_matches_reference(threshold, aligned):
    b = clustered_boxes(400, 7)
    g = torch.Generator().manual_seed(7)
    scores = torch.round(torch.rand(400, generator=g) * 20) / 20  # many ties
    fn = nms_bev_aligned if aligned else nms_bev
    keep = fn(b, scores, threshold)
    assert torch.equal(keep, nms_bev_reference(b, scores, threshold, axis_aligned=aligned))
    assert bool((scores[keep][1:] <= scores[keep][:-1]).all())


def test_batched_nms_matches_reference_with_pre_and_post_max():
    b = clustered_boxes(500, 8, clusters=25)
    g = torch.Generator().manual_seed(8)
    scores = torch.rand(500, generator=g)
    labels = torch.randint(0, 3, (500,), generator=g)
    batch = torch.randint(0, 3, (500,), generator=g)
    for pre, post in [(None, None), (120, None), (None, 20), (150, 30), (0, None), (None, 0)]:
        keep = batched_nms_bev(b, scores, labels, 0.2, pre_max=pre, post_max=post, batch=batch)
        ref = nms_bev_reference(b, scores, 0.2, labels=labels, batch=batch, pre_max=pre, post_max=post)
        assert torch.equal(keep, ref), (pre, post)
        counts = torch.bincount(batch[keep], minlength=3)
        if post is not None:
            assert bool((counts <= post).all())


def test_batched_nms_groups_do_not_depend_on_the_id_values():
    """Huge sample and label ids (up to 2**62 - 1) give the same (sample, label) groups as small ones."""
    b = clustered_boxes(300, 10, clusters=15)
    g = torch.Generator().manual_seed(10)
    scores, labels, batch = torch.rand(300, generator=g), torch.randint(0, 3, (300,), generator=g), \
        torch.randint(0, 4, (300,), generator=g)
    big_labels = torch.tensor([0, 7, 2 ** 62 - 1])[labels]
    big_batch = torch.tensor([2 ** 62 - 1, 5, 2 ** 40, 1])[batch]
    keep = batched_nms_bev(b, scores, labels, 0.2, batch=batch)
    got = batched_nms_bev(b, scores, big_labels, 0.2, batch=big_batch)
    # same boxes kept; ordered by (new) sample id, then score
    assert sorted(got.tolist()) == sorted(keep.tolist())
    assert torch.equal(got, nms_bev_reference(b, scores, 0.2, labels=big_labels, batch=big_batch))


def test_pre_max_restricts_candidates_and_post_max_truncates():
    b = random_boxes(300, 9, extent=100.0, size=(0.5, 1.0))  # sparse: little suppression
    scores = torch.rand(300, generator=torch.Generator().manual_seed(9))
    top = set(torch.argsort(scores, descending=True)[:50].tolist())
    keep = nms_bev(b, scores, 0.5, pre_max=50)
    assert set(keep.tolist()) <= top and len(keep) > 40
    full = nms_bev(b, scores, 0.5)
    assert torch.equal(nms_bev(b, scores, 0.5, post_max=25), full[:25])


def test_nms_ties_threshold_and_groups():
    b = boxes(box(0, 0, 2, 2), box(0, 0, 2, 2), box(1, 0, 2, 2), box(0, 0, 2, 2), dtype=torch.float32)
    scores = torch.tensor([0.5, 0.5, 0.9, 0.5])
    # box 2 (best) overlaps the others with IoU exactly 1/3: kept at threshold 1/3, suppressed just below
    assert nms_bev(b, scores, 1 / 3).tolist() == [2, 0]  # equal scores: lower index first, 1 and 3 = duplicates of 0
    assert nms_bev(b, scores, 0.33).tolist() == [2]
    labels = torch.tensor([0, 1, 0, 1])
    assert batched_nms_bev(b, scores, labels, 0.5).tolist() == [2, 0, 1]
    assert batched_nms_bev(b, scores, labels, 0.5, batch=torch.tensor([0, 0, 1, 1])).tolist() == [0, 1, 2, 3]
    assert nms_bev(b, scores, 1.0).tolist() == [2, 0, 1, 3]


@SETTINGS
@given(seed=st.integers(0, 10 ** 6), n=st.integers(0, 60), threshold=st.floats(0, 1))
def test_property_nms_invariants(seed, n, threshold):
    b = clustered_boxes(n, seed, clusters=4, extent=6.0, dtype=F64) if n else torch.zeros(0, 7, dtype=F64)
    scores = torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=F64)
    keep = nms_bev(b, scores, threshold)
    iou = boxes_iou_bev(b, b)
    kept = torch.zeros(n, dtype=torch.bool)
    kept[keep] = True
    if len(keep) > 1:
        sub = iou[keep][:, keep] - torch.eye(len(keep), dtype=F64) * 2
        assert bool((sub <= threshold).all())  # no kept pair overlaps above the threshold
    for j in torch.nonzero(~kept).flatten().tolist():  # every dropped box has a better kept suppressor
        better = kept & ((scores > scores[j]) | ((scores == scores[j]) & (torch.arange(n) < j)))
        assert bool((iou[j][better] > threshold).any())


# ------------------------------------------------------------------------------------------ opcheck
def test_opcheck():
    b = clustered_boxes(40, 10)
    torch.library.opcheck(torch.ops.fsdlite.boxes_iou_bev.default, (b, b[:7], False))
    torch.library.opcheck(torch.ops.fsdlite.nms_bev_mask.default, (b, torch.arange(40) % 3, 0.3, True))


# ------------------------------------------------------------------------------------------ invalid
GOOD = torch.tensor([box(0, 0, 2, 2)])


@pytest.mark.parametrize('args, error, match', [
    ((torch.zeros(2, 6), GOOD), ValueError, r'boxes_a.shape\[1\] must be >= 7'),
    ((GOOD, torch.zeros(7)), ValueError, 'boxes_b must be 2-D'),
    ((GOOD.long(), GOOD), TypeError, 'boxes_a must be a floating'),
    ((GOOD, GOOD.double()), TypeError, 'boxes_b must have the dtype of boxes_a'),
    # box values: checked once, by the C++ op
    ((torch.tensor([box(0, float('nan'), 1, 1)]), GOOD), RuntimeError,
     'boxes_a must contain only finite values, got nan'),
    ((GOOD, torch.tensor([box(0, 0, 1, -1)])), RuntimeError, r'boxes_b must have sizes l, w >= 0, got boxes_b\[0, 4\]'),
    (([0, 0, 0, 1, 1, 1, 0], GOOD), TypeError, 'boxes_a must be a torch.Tensor'),
    ((GOOD, GOOD.to('meta')), ValueError, 'boxes_a on cpu, boxes_b on meta'),  # was 'Tensor.item() ... meta'
])
def test_invalid_iou_arguments(args, error, match):
    with pytest.raises(error, match=match):
        boxes_iou_bev(*args)


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(scores=torch.zeros(2)), ValueError, r'scores.shape\[0\] must be 1'),
    (dict(scores=torch.zeros(1, dtype=torch.long)), TypeError, 'scores must be a floating'),
    (dict(scores=torch.tensor([float('nan')])), ValueError, 'scores must contain only finite'),
    (dict(iou_threshold=1.5), ValueError, r'iou_threshold must lie in \[0, 1\]'),
    (dict(iou_threshold=-0.1), ValueError, 'iou_threshold must be finite and >= 0'),
    (dict(pre_max=-1), ValueError, 'pre_max must be >= 0'),
    (dict(post_max=2.5), TypeError, 'post_max must be an int'),
    (dict(labels=torch.tensor([-1])), ValueError, 'labels contains -1'),
    (dict(labels=torch.tensor([0.0])), TypeError, 'labels must have one of the dtypes'),
    (dict(labels=None), TypeError, 'labels must be a'),
    (dict(batch=torch.tensor([0, 1])), ValueError, r'batch.shape\[0\] must be 1'),
    (dict(scores=torch.ones(1, device='meta')), ValueError, 'boxes on cpu, scores on meta'),
    (dict(batch=torch.zeros(1, dtype=torch.long, device='meta')), ValueError, 'batch on meta'),
])
def test_invalid_nms_arguments(kwargs, error, match):
    args = dict(boxes=GOOD, scores=torch.ones(1), labels=torch.zeros(1, dtype=torch.long), iou_threshold=0.5)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        batched_nms_bev(**args)


def test_raw_ops_validate_in_cpp():
    with pytest.raises(RuntimeError, match='iou_threshold must lie in'):
        torch.ops.fsdlite.nms_bev_mask(GOOD, torch.zeros(1, dtype=torch.long), 2.0, False)
    with pytest.raises(RuntimeError, match=r'boxes_a must have sizes l, w >= 0, got boxes_a\[0, 3\]=-1'):
        torch.ops.fsdlite.boxes_iou_bev(torch.tensor([box(0, 0, -1, 1)]), GOOD, False)
    with pytest.raises(RuntimeError, match='groups.size'):
        torch.ops.fsdlite.nms_bev_mask(GOOD, torch.zeros(3, dtype=torch.long), 0.5, False)


# ------------------------------------------------------------------------------------------ CUDA
@pytest.mark.cuda
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_cuda_iou_matches_cpu(dtype):
    a, b = random_boxes(700, 11, dtype=dtype), random_boxes(300, 12, dtype=dtype)
    for fn in (boxes_iou_bev, boxes_iou_bev_aligned):
        assert torch.allclose(fn(a.cuda(), b.cuda()).cpu(), fn(a, b), atol=1e-6)
    torch.library.opcheck(torch.ops.fsdlite.boxes_iou_bev.default, (a[:20].cuda(), b[:9].cuda(), False))


@pytest.mark.cuda
def test_cuda_nms_matches_cpu():
    b = clustered_boxes(3000, 13, clusters=80, extent=80.0)
    g = torch.Generator().manual_seed(13)
    scores = torch.round(torch.rand(3000, generator=g) * 50) / 50
    labels, batch = torch.randint(0, 3, (3000,), generator=g), torch.randint(0, 2, (3000,), generator=g)
    assert torch.equal(nms_bev(b.cuda(), scores.cuda(), 0.25).cpu(), nms_bev(b, scores, 0.25))
    assert torch.equal(nms_bev_aligned(b.cuda(), scores.cuda(), 0.25).cpu(), nms_bev_aligned(b, scores, 0.25))
    got = batched_nms_bev(b.cuda(), scores.cuda(), labels.cuda(), 0.1, pre_max=1000, post_max=100, batch=batch.cuda())
    assert torch.equal(got.cpu(), batched_nms_bev(b, scores, labels, 0.1, pre_max=1000, post_max=100, batch=batch))
    torch.library.opcheck(torch.ops.fsdlite.nms_bev_mask.default, (b[:70].cuda(), labels[:70].cuda(), 0.3, False))
