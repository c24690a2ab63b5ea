"""Global augmentations (rotation, scaling, translation, BEV flips) and point shuffling.

Randomness comes from numpy's global generator, which mmengine seeds per run and per worker.
"""
import numpy as np
import torch
from mmcv.transforms import BaseTransform

from ...registry import TRANSFORMS
from ...structures import boxes as box_ops
from ._fields import append_flow, select_points


def _pair(name, value, low=None):
    lo, hi = (float(v) for v in value)
    if lo > hi or (low is not None and lo <= low):
        raise ValueError(f'{name} must be (min, max) with min <= max' + (f' and min > {low}' if low is not None else '')
                         + f', got {value!r}')
    return lo, hi


@TRANSFORMS.register_module()
class GlobalRotScaleTrans(BaseTransform):
    """Rotate about +z, scale about the origin, then translate points and boxes together.

    Records ``pcd_rotation_angle``, ``pcd_scale_factor``, ``pcd_trans`` and the flow steps 'R', 'S', 'T'.

    Args:
        rot_range (sequence): (min, max) rotation angle in radians (uniform); a number r means (-r, r).
        scale_ratio_range (sequence): (min, max) scale factor (uniform, > 0).
        translation_std (sequence): std-dev (m) of a normal x, y, z shift.
    """

    def __init__(self, rot_range=(-0.78539816, 0.78539816), scale_ratio_range=(0.95, 1.05),
                 translation_std=(0.0, 0.0, 0.0)):
        if isinstance(rot_range, (int, float)):
            rot_range = (-abs(rot_range), abs(rot_range))
        self.rot_range = _pair('GlobalRotScaleTrans: rot_range', rot_range)
        self.scale_ratio_range = _pair('GlobalRotScaleTrans: scale_ratio_range', scale_ratio_range, low=0.0)
        std = [float(v) for v in translation_std]
        if len(std) != 3 or min(std) < 0:
            raise ValueError(f'GlobalRotScaleTrans: translation_std must be 3 values >= 0, got {translation_std!r}')
        self.translation_std = std

    def transform(self, results):
        """Draw an angle, scale and shift; apply them to ``points`` and ``gt_bboxes_3d`` and record them."""
        angle = float(np.random.uniform(*self.rot_range))
        scale = float(np.random.uniform(*self.scale_ratio_range))
        shift = np.random.normal(scale=self.translation_std, size=3) if any(self.translation_std) else np.zeros(3)
        for key, rotate, rescale in (('points', box_ops.rotate_points, box_ops.scale_points),
                                     ('gt_bboxes_3d', box_ops.rotate_boxes, box_ops.scale_boxes)):
            if key in results:
                value = rescale(rotate(results[key], angle), scale)
                results[key] = box_ops.translate_points(value, shift.tolist())
        results['pcd_rotation_angle'] = angle
        results['pcd_scale_factor'] = scale
        results['pcd_trans'] = shift.tolist()
        for step in ('R', 'S', 'T'):
            append_flow(results, step)
        return results

    def __repr__(self):
        return (f'{type(self).__name__}(rot_range={self.rot_range}, scale_ratio_range={self.scale_ratio_range}, '
                f'translation_std={self.translation_std})')


@TRANSFORMS.register_module()
class RandomFlip3D(BaseTransform):
    """Mirror points and boxes in BEV: horizontally (y -> -y) and/or vertically (x -> -x).

    Records ``pcd_horizontal_flip`` / ``pcd_vertical_flip`` and the flow steps 'HF' / 'VF'.

    Args:
        flip_ratio_bev_horizontal (float): probability of the horizontal flip.
        flip_ratio_bev_vertical (float): probability of the vertical flip (keep 0 for front-view ranges
            such as KITTI's x >= 0, which a vertical flip would empty).
    """

    def __init__(self, flip_ratio_bev_horizontal=0.5, flip_ratio_bev_vertical=0.0):
        for name, p in (('flip_ratio_bev_horizontal', flip_ratio_bev_horizontal),
                        ('flip_ratio_bev_vertical', flip_ratio_bev_vertical)):
            if not 0.0 <= float(p) <= 1.0:
                raise ValueError(f'RandomFlip3D: {name} must be in [0, 1], got {p!r}')
        self.ratios = dict(horizontal=float(flip_ratio_bev_horizontal), vertical=float(flip_ratio_bev_vertical))

    def transform(self, results):
        """Flip ``points`` / ``gt_bboxes_3d`` per direction with its probability; sets ``pcd_*_flip``."""
        for direction, ratio in self.ratios.items():
            flip = bool(np.random.rand() < ratio) if ratio > 0 else False
            results[f'pcd_{direction}_flip'] = flip
            if not flip:
                continue
            if 'points' in results:
                results['points'] = box_ops.flip_points(results['points'], direction)
            if 'gt_bboxes_3d' in results:
                results['gt_bboxes_3d'] = box_ops.flip_boxes(results['gt_bboxes_3d'], direction)
            append_flow(results, 'HF' if direction == 'horizontal' else 'VF')
        return results

    def __repr__(self):
        return (f'{type(self).__name__}(flip_ratio_bev_horizontal={self.ratios["horizontal"]}, '
                f'flip_ratio_bev_vertical={self.ratios["vertical"]})')


@TRANSFORMS.register_module()
class PointShuffle(BaseTransform):
    """Randomly permute the points (and every per-point mask with them)."""

    def transform(self, results):
        """Apply one random permutation to ``points`` and the per-point masks."""
        perm = torch.from_numpy(np.random.permutation(len(results['points'])))
        return select_points(results, perm)
