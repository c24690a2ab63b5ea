"""Vote (centre-offset) encoding and the point box coder shared by FSD-lite and FSDv2-lite.

* Votes: a point's offset ``d`` to its object's gravity centre is regressed as
  ``t = sign(d) * sqrt(|d|)`` (compresses long offsets) and decoded as ``d = t * |t|``.
* Boxes (:class:`PointBoxCoder`): a 7-dof lidar box ``[x, y, z_bottom, l, w, h, yaw]`` is coded
  relative to a reference point ``r`` (a cluster centre or a virtual voxel centre) as 8 numbers
  ``[x - r_x, y - r_y, z_gravity - r_z, log l, log w, log h, sin a, cos a]`` with
  ``a = yaw * 2 pi / yaw_period``.  ``yaw_period=2 pi`` keeps the heading direction;
  ``yaw_period=pi`` codes only the orientation (a box and its 180-degree turn are the same
  target), which is what lidar can observe of front/back-symmetric objects and all that BEV / 3D
  IoU measure.
  With ``sensor_frame=True`` the centre offset ``(x - r_x, y - r_y)`` is coded along and across the line of
  sight from the sensor (the origin) to ``r`` instead of along the lidar axes: what the points show of an object
  is set by the direction it is seen from, so "the centre lies 0.9 m behind the visible surface" is one target
  wherever the object stands, where lidar axes make it a different (x, y) for every bearing.
"""
import math

import torch

from ...registry import TASK_UTILS


def encode_vote(offset):
    """Offsets (..., 3) to vote targets ``sign(d) * sqrt(|d|)`` (same shape)."""
    return torch.sign(offset) * torch.sqrt(offset.abs())


def decode_vote(code):
    """Vote predictions (..., 3) back to offsets ``t * |t|`` (same shape)."""
    return code * code.abs()


@TASK_UTILS.register_module()
class PointBoxCoder:
    """Codes lidar boxes relative to reference points (Δxyz to the gravity centre, log dims, sin/cos yaw).

    Args:
        max_log_dim (float): log-dimensions are clamped to this value when decoding, so an untrained
            head cannot produce overflowing (inf) sizes.
        yaw_period (float): ``2 pi`` (heading) or ``pi`` (orientation only); decoded yaw lies in
            ``(-yaw_period / 2, yaw_period / 2]``.
        sensor_frame (bool): code the BEV centre offset along / across the sensor's line of sight to the
            reference point (module docstring).
    """

    code_size = 8

    def __init__(self, max_log_dim=4.0, yaw_period=2 * math.pi, sensor_frame=False):
        self.max_log_dim = float(max_log_dim)
        self.sensor_frame = bool(sensor_frame)
        if not any(math.isclose(float(yaw_period), p) for p in (math.pi, 2 * math.pi)):
            raise ValueError(f'PointBoxCoder: yaw_period must be pi or 2 pi, got {yaw_period!r}')
        self.yaw_scale = 2 * math.pi / float(yaw_period)

    def encode(self, boxes, ref_xyz):
        """Encode boxes (K, 7) (bottom-centre z, positive dims) relative to ``ref_xyz`` (K, 3) -> (K, 8)."""
        if boxes.shape[:-1] != ref_xyz.shape[:-1] or boxes.shape[-1] != 7 or ref_xyz.shape[-1] != 3:
            raise ValueError(f'PointBoxCoder.encode: boxes must be (K, 7) and ref_xyz (K, 3) with the same K, '
                             f'got {tuple(boxes.shape)} and {tuple(ref_xyz.shape)}')
        dims = boxes[..., 3:6]
        if dims.numel() and not bool((dims > 0).all()):
            raise ValueError(f'PointBoxCoder.encode: box dimensions (l, w, h) must be > 0, got min {float(dims.min())}')
        centre = torch.cat([boxes[..., :2], boxes[..., 2:3] + 0.5 * boxes[..., 5:6]], dim=-1)
        angle = boxes[..., 6:7] * self.yaw_scale
        return torch.cat([self._turn(centre - ref_xyz, ref_xyz, -1), dims.log(), angle.sin(), angle.cos()],
                         dim=-1)

    def _turn(self, offset, ref_xyz, sign):
        """Offsets (..., 3) turned about z by ``sign`` times the bearing from the sensor to ``ref_xyz`` (..., 3):
        -1 takes lidar axes to the line-of-sight frame, +1 back; unchanged without ``sensor_frame``."""
        if not self.sensor_frame:
            return offset
        r = ref_xyz[..., :2].norm(dim=-1, keepdim=True).clamp(min=1e-3)
        c, s = ref_xyz[..., 0:1] / r, sign * ref_xyz[..., 1:2] / r
        return torch.cat([offset[..., 0:1] * c - offset[..., 1:2] * s, offset[..., 0:1] * s + offset[..., 1:2] * c,
                          offset[..., 2:3]], dim=-1)

    def decode(self, codes, ref_xyz):
        """Decode codes (..., 8) relative to ``ref_xyz`` (..., 3) into boxes (..., 7) with bottom-centre z."""
        if codes.shape[-1] != self.code_size or codes.shape[:-1] != ref_xyz.shape[:-1]:
            raise ValueError(f'PointBoxCoder.decode: codes must be (..., 8) and ref_xyz (..., 3) with matching '
                             f'leading shapes, got {tuple(codes.shape)} and {tuple(ref_xyz.shape)}')
        centre = self._turn(codes[..., :3], ref_xyz, 1) + ref_xyz
        dims = codes[..., 3:6].clamp(max=self.max_log_dim).exp()
        yaw = torch.atan2(codes[..., 6:7], codes[..., 7:8]) / self.yaw_scale
        bottom = centre[..., 2:3] - 0.5 * dims[..., 2:3]
        return torch.cat([centre[..., :2], bottom, dims, yaw], dim=-1)
