"""Box helpers: corners, augmentation geometry, camera <-> lidar conversion, collision tests."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fsdlite.ops
from fsdlite.ops import count_points_in_boxes
from fsdlite.structures import boxes as B

SETTINGS = settings(max_examples=30, deadline=None)


def random_boxes(seed, m=6):
    g = torch.Generator().manual_seed(seed)
    b = torch.rand(m, 7, generator=g, dtype=torch.float64)
    return b * torch.tensor([40, 40, 1, 4, 2, 2, 2 * math.pi], dtype=torch.float64) \
        + torch.tensor([0, -20, -2, 0.5, 0.5, 0.5, -math.pi], dtype=torch.float64)


def as_set(corners):
    """Sort each box's corners lexicographically so corner order does not matter."""
    key = corners[..., 0] * 1e6 + corners[..., 1] * 1e3 + (corners[..., 2] if corners.shape[-1] > 2 else 0)
    return torch.gather(corners, 1, key.argsort(dim=1)[..., None].expand_as(corners))


def test_corners_of_axis_aligned_box():
    box = torch.tensor([[1.0, 2.0, -1.0, 4.0, 2.0, 1.5, 0.0]])
    assert B.bev_corners(box)[0].tolist() == [[3.0, 3.0], [-1.0, 3.0], [-1.0, 1.0], [3.0, 1.0]]
    corners = B.box_corners(box)[0]
    assert corners.shape == (8, 3)
    assert corners[:4, 2].tolist() == [-1.0] * 4 and corners[4:, 2].tolist() == [0.5] * 4
    assert torch.equal(corners[:4, :2], corners[4:, :2])
    quarter = B.bev_corners(torch.tensor([[0.0, 0.0, 0.0, 4.0, 2.0, 1.0, math.pi / 2]]))[0]
    assert torch.allclose(quarter, torch.tensor([[-1.0, 2.0], [-1.0, -2.0], [1.0, -2.0], [1.0, 2.0]]), atol=1e-6)


def test_empty_boxes():
    empty = torch.zeros(0, 7)
    assert B.bev_corners(empty).shape == (0, 4, 2)
    assert B.box_corners(empty).shape == (0, 8, 3)
    assert B.rotate_boxes(empty, 0.3).shape == (0, 7)
    assert B.bev_overlap(empty, torch.ones(3, 7)).shape == (0, 3)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), angle=st.floats(-7, 7))
def test_rotation_moves_corners_rigidly(seed, angle):
    boxes = random_boxes(seed)
    rotated = B.rotate_boxes(boxes, angle)
    assert torch.allclose(B.box_corners(rotated), B.rotate_points(B.box_corners(boxes).reshape(-1, 3), angle)
                          .reshape(-1, 8, 3), atol=1e-9)
    assert bool(((rotated[:, 6] >= -math.pi) & (rotated[:, 6] < math.pi)).all())


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), direction=st.sampled_from(B.FLIP_DIRECTIONS), factor=st.floats(0.5, 2.0))
def test_flip_and_scale_move_corners_consistently(seed, direction, factor):
    boxes = random_boxes(seed)
    flipped = B.flip_boxes(boxes, direction)
    expected = B.flip_points(B.box_corners(boxes).reshape(-1, 3), direction).reshape(-1, 8, 3)
    assert torch.allclose(as_set(B.box_corners(flipped)), as_set(expected), atol=1e-9)
    twice = B.flip_boxes(flipped, direction)  # an involution (yaw up to wrapping)
    assert torch.allclose(twice[:, :6], boxes[:, :6])
    assert torch.allclose(torch.cos(twice[:, 6]), torch.cos(boxes[:, 6]))
    assert torch.allclose(torch.sin(twice[:, 6]), torch.sin(boxes[:, 6]))
    scaled = B.scale_boxes(boxes, factor)
    assert torch.allclose(B.box_corners(scaled), B.box_corners(boxes) * factor, atol=1e-9)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), angle=st.floats(-3.2, 3.2), factor=st.floats(0.8, 1.25),
       direction=st.sampled_from(B.FLIP_DIRECTIONS))
def test_points_in_boxes_counts_survive_augmentation(seed, angle, factor, direction):
    """Transforming points and boxes with the same helper keeps the membership of every point."""
    g = torch.Generator().manual_seed(seed)
    boxes = random_boxes(seed, m=5)
    # 40 random points around each box (continuous noise: none lands exactly on a face)
    noise = torch.randn(5, 40, 3, generator=g, dtype=torch.float64) * boxes[:, None, 3:6] * 0.4
    points = (boxes[:, None, :3] + noise + torch.tensor([0, 0, 0.8], dtype=torch.float64)).reshape(-1, 3)
    before = count_points_in_boxes(points, boxes)
    for fp, fb, arg in ((B.rotate_points, B.rotate_boxes, angle), (B.scale_points, B.scale_boxes, factor),
                        (B.flip_points, B.flip_boxes, direction)):
        assert torch.equal(count_points_in_boxes(fp(points, arg), fb(boxes, arg)), before)
    shift = torch.tensor([1.5, -2.0, 0.25], dtype=torch.float64)
    assert torch.equal(count_points_in_boxes(B.translate_points(points, shift), B.translate_boxes(boxes, shift)),
                       before)


def test_camera_lidar_roundtrip_and_kitti_rule():
    lidar2cam = torch.tensor([[0.0, -1.0, 0.0, 0.1], [0.0, 0.0, -1.0, -0.2], [1.0, 0.0, 0.0, -0.3],
                              [0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    cam = torch.tensor([[2.0, 1.6, 10.0, 3.9, 1.5, 1.6, 0.3]], dtype=torch.float64)
    lidar = B.camera_to_lidar_boxes(cam, lidar2cam)
    # centre = inv(lidar2cam) @ [x, y, z, 1]; (l, h, w) -> (l, w, h); yaw = -ry - pi/2
    centre = torch.linalg.inv(lidar2cam) @ torch.tensor([2.0, 1.6, 10.0, 1.0], dtype=torch.float64)
    assert torch.allclose(lidar[0, :3], centre[:3])
    assert lidar[0, 3:6].tolist() == [3.9, 1.6, 1.5]
    assert math.isclose(lidar[0, 6].item(), -0.3 - math.pi / 2)
    assert torch.allclose(B.lidar_to_camera_boxes(lidar, lidar2cam), cam)
    boxes = random_boxes(3)
    assert torch.allclose(B.camera_to_lidar_boxes(B.lidar_to_camera_boxes(boxes, lidar2cam), lidar2cam), boxes)
    with pytest.raises(ValueError, match='4x4'):
        B.camera_to_lidar_boxes(cam, torch.eye(3))


def test_gravity_bottom_roundtrip():
    boxes = random_boxes(4)
    assert torch.allclose(B.gravity_to_bottom(B.bottom_to_gravity(boxes)), boxes)
    assert torch.allclose(B.bottom_to_gravity(boxes)[:, 2], boxes[:, 2] + boxes[:, 5] / 2)


def test_flip_direction_is_validated():
    with pytest.raises(ValueError, match="direction must be one of.*'diagonal'"):
        B.flip_boxes(torch.zeros(1, 7), 'diagonal')


def test_collision_tests():
    a = torch.tensor([[0.0, 0.0, 0.0, 4.0, 2.0, 1.5, 0.0]])
    others = torch.tensor([[3.0, 0.0, 0.0, 4.0, 2.0, 1.5, 0.0],     # overlaps (x ranges (-2,2) and (1,5))
                           [0.0, 2.5, 0.0, 4.0, 2.0, 1.5, 0.0],     # 0.5 m gap across
                           [30.0, 0.0, 0.0, 4.0, 2.0, 1.5, 1.0]])   # far away
    if 'boxes_iou_bev' in fsdlite.ops.__all__:  # exact rotated-rectangle test
        assert B.bev_overlap(a, others).tolist() == [[True, False, False]]
    else:  # conservative fallback
        assert B.bev_overlap(a, others).tolist() == [[True, True, False]]
    assert B.bev_overlap(a, others, margin=1.0).tolist() == [[True, True, False]]
    circle = B.bev_circle_overlap(a, others)
    assert circle.tolist() == [[True, True, False]]  # conservative: the 0.5 m gap is inside the circles
    g = torch.Generator().manual_seed(0)
    many = torch.rand(60, 7, generator=g) * torch.tensor([20, 20, 0, 4, 2, 2, 6.3]) + 0.2
    exact = B.bev_overlap(many, many)
    assert bool((B.bev_circle_overlap(many, many) | ~exact).all()), 'circle test missed an overlap'
