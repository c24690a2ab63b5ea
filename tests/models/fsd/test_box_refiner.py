"""Box refiner: box frame, box-point pairs, residual coding, targets, and that it starts as the identity."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.models.fsd.box_refiner import BoxRefiner, box_frame, box_point_pairs, box_point_slots
from fsdlite.models.fsd.gt import GtBatch
from fsdlite.structures.bounds import BoundExceededError


def _refiner(**kwargs):
    return BoxRefiner(point_channels=4, num_classes=3, **kwargs)


def test_box_frame_measures_along_the_heading():
    box = torch.tensor([[10.0, 5.0, -1.0, 4.0, 2.0, 1.5, math.pi / 2]])  # heading +y; centre z = -0.25
    xyz = torch.tensor([[10.0, 6.0, -0.25], [9.0, 5.0, 0.25]])
    local = box_frame(xyz, box.expand(2, 7))
    torch.testing.assert_close(local, torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.5]]), atol=1e-6, rtol=0)


def test_pairs_keep_points_inside_the_grown_box_of_their_own_sample():
    boxes = torch.tensor([[0.0, 0.0, 0.0, 4.0, 2.0, 1.5, 0.0], [20.0, 0.0, 0.0, 4.0, 2.0, 1.5, 0.0]])
    xyz = torch.tensor([[1.9, 0.0, 0.7],    # inside box 0
                        [2.3, 0.0, 0.7],    # in box 0 grown by 0.5
                        [2.7, 0.0, 0.7],    # outside even grown
                        [0.0, 0.0, 2.0],    # above box 0 (grown by 0.3 in z only)
                        [20.0, 0.5, 0.7],   # inside box 1, but of sample 0
                        [20.0, 0.5, 0.7],   # inside box 1, sample 1
                        [2.4, 1.4, 0.7]])   # in the corner of box 0 grown (beyond its half-diagonal + 0.5)
    point_batch = torch.tensor([0, 0, 0, 0, 0, 1, 0])
    box, point, local = box_point_pairs(xyz, point_batch, boxes, torch.tensor([0, 1]), 0.5, 0.3)
    assert list(zip(box.tolist(), point.tolist())) == [(0, 0), (0, 1), (0, 6), (1, 5)]
    torch.testing.assert_close(local[3], torch.tensor([0.0, 0.5, -0.05]), atol=1e-6, rtol=0)


def test_pairs_cap_points_per_box_with_a_fixed_subset():
    boxes = torch.tensor([[0.0, 0.0, 0.0, 4.0, 2.0, 1.5, 0.0]])
    xyz = torch.rand(200, 3) * torch.tensor([3.0, 1.5, 1.0]) - torch.tensor([1.5, 0.75, -0.2])
    zeros = torch.zeros(200, dtype=torch.long)
    full = box_point_pairs(xyz, zeros, boxes, torch.zeros(1, dtype=torch.long), 0.5, 0.3)
    capped = box_point_pairs(xyz, zeros, boxes, torch.zeros(1, dtype=torch.long), 0.5, 0.3, max_points=50)
    again = box_point_pairs(xyz, zeros, boxes, torch.zeros(1, dtype=torch.long), 0.5, 0.3, max_points=50)
    assert full[1].numel() == 200 and capped[1].numel() == 50
    assert torch.equal(capped[1], again[1]) and len(set(capped[1].tolist())) == 50


def test_fixed_slots_hold_the_same_pairs_packed_and_count_what_does_not_fit():
    torch.manual_seed(0)
    xyz = torch.rand(150, 3) * torch.tensor([20.0, 6.0, 2.0]) - torch.tensor([0.0, 3.0, 0.5])
    point_batch = torch.arange(150) % 2
    boxes = torch.tensor([[3.0, 0.0, 0.0, 4.0, 2.0, 1.5, 0.3], [9.0, 1.0, 0.0, 4.0, 2.0, 1.5, -0.2],
                          [15.0, 0.0, 0.0, 5.0, 3.0, 1.5, 1.0]])
    box_batch = torch.tensor([0, 1, 0])
    want = box_point_pairs(xyz, point_batch, boxes, box_batch, 0.5, 0.3, max_points=10)
    real = {(b, p): tuple(v) for b, p, v in zip(want[0].tolist(), want[1].tolist(), want[2].tolist())}
    per_box = torch.bincount(want[0], minlength=3).tolist()
    assert max(per_box) == 10 and 0 < min(per_box) < 10  # the 10-point cap binds on some box, not on all
    # padded as the fixed mode gives them: 8 padding points, one padding box
    xyz_p, batch_p = torch.cat([xyz, xyz[:8]]), torch.cat([point_batch, point_batch[:8]])
    point_valid = torch.arange(158) < 150
    boxes_p, box_batch_p = torch.cat([boxes, boxes[:1]]), torch.cat([box_batch, box_batch[:1]])
    box_valid = torch.tensor([True, True, True, False])

    def slots(max_pairs=None, strict=None):
        return box_point_slots(xyz_p, batch_p, point_valid, boxes_p, box_batch_p, box_valid, 0.5, 0.3, 10,
                               max_pairs, strict)

    for out, rows in ((slots(), 4 * 10), (slots(len(real) + 3), len(real) + 3)):
        assert out.box.shape == out.point.shape == (rows,) and int(out.dropped) == 0
        used = out.point < 158
        assert torch.equal(used, out.box < 4)
        got = {(b, p): tuple(v) for b, p, v in zip(out.box[used].tolist(), out.point[used].tolist(),
                                                   out.local[used].tolist())}
        assert got.keys() == real.keys()
        for key, value in got.items():
            assert value == pytest.approx(real[key], abs=1e-5)
        assert bool((out.local[~used] == 0).all())
    packed = slots(len(real) + 3)
    assert bool(packed.point[:len(real)].lt(158).all())  # the real pairs first
    short = slots(len(real) - 2, strict=False)
    assert int(short.dropped) == 2 and int((short.point < 158).sum()) == len(real) - 2
    with pytest.raises(BoundExceededError, match='max_refiner_pairs'):
        slots(len(real) - 2, strict=True)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-0.5, 0.5, allow_nan=False), min_size=7, max_size=7), st.floats(-3.1, 3.1))
def test_residuals_round_trip(residual, yaw):
    refiner = _refiner()
    box = torch.tensor([[12.0, -3.0, -1.5, 3.9, 1.6, 1.5, yaw]], dtype=torch.float64)
    r = torch.tensor([residual], dtype=torch.float64)
    moved = refiner.decode(box, r)
    torch.testing.assert_close(refiner.encode(box, moved), r, atol=1e-9, rtol=0)


def test_yaw_residual_is_wrapped_to_the_orientation_period():
    refiner = _refiner(yaw_period=math.pi)
    box = torch.tensor([[5.0, 0.0, 0.0, 4.0, 2.0, 1.5, 0.1]])
    turned = box.clone()
    turned[0, 6] = 0.1 + math.pi - 0.05
    assert abs(float(refiner.encode(box, turned)[0, 6]) + 0.05) < 1e-5


def test_targets_need_the_same_sample_class_and_enough_overlap():
    refiner = _refiner(pos_iou=0.3)
    gt = GtBatch(torch.tensor([[10.0, 0.0, 0.0, 4.0, 2.0, 1.5, 0.0]]), torch.tensor([0]), torch.tensor([0]))
    boxes = torch.tensor([[10.5, 0.0, 0.0, 4.0, 2.0, 1.5, 0.0]] * 3 + [[14.0, 0.0, 0.0, 4.0, 2.0, 1.5, 0.0]])
    targets, pos = refiner.get_targets(boxes, torch.tensor([0, 1, 0, 0]), torch.tensor([0, 0, 1, 0]), gt)
    assert pos.tolist() == [True, False, False, False]  # other sample, other class, IoU 0 (4 m away)
    torch.testing.assert_close(targets[0], gt.boxes[0])


def test_starts_as_the_identity_and_learns_from_jittered_truth():
    torch.manual_seed(0)
    refiner = _refiner()
    points = torch.cat([torch.rand(300, 3) * torch.tensor([4.0, 2.0, 1.5]) + torch.tensor([8.0, -1.0, -1.7]),
                        torch.rand(300, 1)], dim=1)
    probs, batch = torch.rand(300, 3), torch.zeros(300, dtype=torch.long)
    boxes = torch.tensor([[10.0, 0.0, -1.7, 4.0, 2.0, 1.5, 0.0], [30.0, 0.0, -1.7, 4.0, 2.0, 1.5, 0.0]])
    labels = torch.tensor([0, 0])
    pairs = refiner.pairs(points[:, :3], batch, boxes, torch.zeros(2, dtype=torch.long))
    torch.testing.assert_close(refiner.refine(points, probs, boxes, labels, pairs),
                               boxes)  # the second box has no point around it: unchanged as well
    gt = GtBatch(boxes[:1], torch.tensor([0]), torch.tensor([0]))
    losses = refiner.loss(points, probs, batch, boxes[:1] + 0.2, torch.tensor([0]), torch.tensor([0]), gt)
    assert float(losses['num_refine_pos']) == 1 + refiner.jitter_per_gt
    losses['loss_refine'].backward()
    assert refiner.reg.weight.grad.abs().sum() > 0


def test_bad_options_name_the_argument():
    for bad in (dict(max_boxes=0), dict(max_points=0), dict(enlarge=(0.5,))):
        with pytest.raises(ValueError, match=next(iter(bad))):
            _refiner(**bad)
