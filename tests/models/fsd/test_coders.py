"""Vote encoding and point box coder: round trips, hand values, invalid input."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.models.fsd.coders import PointBoxCoder, decode_vote, encode_vote
from fsdlite.registry import TASK_UTILS


def test_vote_hand_values():
    d = torch.tensor([[4.0, -9.0, 0.0], [0.25, -0.01, 1.0]])
    t = encode_vote(d)
    assert torch.allclose(t, torch.tensor([[2.0, -3.0, 0.0], [0.5, -0.1, 1.0]]))
    assert torch.allclose(decode_vote(t), d)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-50, 50, allow_nan=False), min_size=3, max_size=30).filter(lambda v: len(v) % 3 == 0))
def test_vote_round_trip(values):
    d = torch.tensor(values, dtype=torch.float64).view(-1, 3)
    assert torch.allclose(decode_vote(encode_vote(d)), d, atol=1e-9)
    assert torch.equal(torch.sign(encode_vote(d)), torch.sign(d))


def test_box_coder_hand_case():
    coder = TASK_UTILS.build(dict(type='PointBoxCoder'))
    box = torch.tensor([[10.0, 2.0, -1.0, 4.0, 2.0, 1.5, math.pi / 2]])
    ref = torch.tensor([[9.0, 2.5, 0.0]])
    code = coder.encode(box, ref)
    expected = torch.tensor([[1.0, -0.5, -0.25, math.log(4.0), math.log(2.0), math.log(1.5), 1.0, 0.0]])
    assert torch.allclose(code, expected, atol=1e-6)
    assert torch.allclose(coder.decode(code, ref), box, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 20), st.integers(0, 2 ** 31 - 1))
def test_box_coder_round_trip(k, seed):
    g = torch.Generator().manual_seed(seed)
    boxes = torch.cat([torch.rand(k, 3, generator=g, dtype=torch.float64) * 40 - 20,
                       torch.rand(k, 3, generator=g, dtype=torch.float64) * 5 + 0.1,
                       (torch.rand(k, 1, generator=g, dtype=torch.float64) * 2 - 1) * math.pi * 0.999], dim=1)
    ref = boxes[:, :3] + torch.randn(k, 3, generator=g, dtype=torch.float64)
    coder = PointBoxCoder()
    assert coder.encode(boxes, ref).shape == (k, 8)
    assert torch.allclose(coder.decode(coder.encode(boxes, ref), ref), boxes, atol=1e-9)


def test_box_coder_decode_batched_shape_and_clamp():
    coder = PointBoxCoder(max_log_dim=3.0)
    codes = torch.zeros(2, 3, 8)
    codes[..., 3:6] = 100.0  # would overflow without the clamp
    codes[..., 7] = 1.0
    boxes = coder.decode(codes, torch.zeros(2, 3, 3))
    assert boxes.shape == (2, 3, 7)
    assert torch.isfinite(boxes).all()
    assert torch.allclose(boxes[..., 3], torch.full((2, 3), math.exp(3.0)))


def test_box_coder_invalid():
    coder = PointBoxCoder()
    with pytest.raises(ValueError, match='ref_xyz'):
        coder.encode(torch.ones(2, 7), torch.zeros(3, 3))
    bad = torch.ones(1, 7)
    bad[0, 4] = 0.0
    with pytest.raises(ValueError, match='dimensions'):
        coder.encode(bad, torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r'\(\.\.\., 8\)'):
        coder.decode(torch.zeros(2, 7), torch.zeros(2, 3))


def test_box_coder_orientation_only():
    coder = PointBoxCoder(yaw_period=math.pi)
    box = torch.tensor([[1.0, 2.0, 0.0, 4.0, 2.0, 1.5, 0.4]])
    turned = box.clone()
    turned[0, 6] += math.pi
    ref = torch.zeros(1, 3)
    assert torch.allclose(coder.encode(box, ref), coder.encode(turned, ref), atol=1e-6)
    assert torch.allclose(coder.decode(coder.encode(turned, ref), ref), box, atol=1e-5)
    decoded = coder.decode(coder.encode(torch.tensor([[0, 0, 0, 1, 1, 1, 2.0]]), ref), ref)
    assert decoded[0, 6] == pytest.approx(2.0 - math.pi, abs=1e-5)  # folded into (-pi/2, pi/2]
    with pytest.raises(ValueError, match='yaw_period'):
        PointBoxCoder(yaw_period=1.0)


def test_sensor_frame_codes_the_offset_along_the_line_of_sight():
    """A centre 1 m further from the sensor than the reference codes as (1, 0) at any bearing; decoding inverts."""
    coder = PointBoxCoder(yaw_period=math.pi, sensor_frame=True)
    plain = PointBoxCoder(yaw_period=math.pi)
    for bearing in (0.0, 0.8, 2.5, -1.9):
        ref = torch.tensor([[10 * math.cos(bearing), 10 * math.sin(bearing), -1.0]])
        box = torch.tensor([[11 * math.cos(bearing), 11 * math.sin(bearing), -1.7, 4.0, 1.7, 1.5, 0.3]])
        code = coder.encode(box, ref)
        assert torch.allclose(code[0, :3], torch.tensor([1.0, 0.0, 0.05]), atol=1e-5)
        assert torch.allclose(code[0, 3:], plain.encode(box, ref)[0, 3:])
        assert torch.allclose(coder.decode(code, ref), box, atol=1e-5)
    # across the line of sight: to the left of the sensor's view is +
    ref = torch.tensor([[0.0, 10.0, 0.0]])
    box = torch.tensor([[-0.5, 10.0, -0.5, 4.0, 1.7, 1.0, 0.0]])
    assert torch.allclose(coder.encode(box, ref)[0, :3], torch.tensor([0.0, 0.5, 0.0]), atol=1e-6)
