"""Random street-like scenes for the synthetic lidar dataset: object layout, clutter and rendering.

A scene is a flat ground plane ``z = -sensor_height`` with non-overlapping boxes standing on it:
objects of the annotated classes (Car / Pedestrian / Cyclist by default, with size jitter and
mostly road-aligned headings for vehicles) and un-annotated clutter (walls along the road, poles,
low blocks) so that foreground is not trivially separable.  :func:`render_frame` ray-casts a
:class:`~fsdlite.datasets.raycast.LidarSpec` against it and applies range noise, dropout and an
intensity model (material reflectivity x incidence x range falloff).
"""
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..structures.boxes import bev_circle_overlap, bev_overlap
from .raycast import GROUND, LidarSpec, cast_rays

DEFAULT_CLASSES = ('Car', 'Pedestrian', 'Cyclist')
CLASS_SIZES = {'Car': (3.9, 1.6, 1.56), 'Pedestrian': (0.8, 0.6, 1.73), 'Cyclist': (1.76, 0.6, 1.73)}
CLASS_COUNTS = {'Car': (3, 10), 'Pedestrian': (0, 5), 'Cyclist': (0, 3)}
CLASS_REFLECTIVITY = {'Car': (0.2, 0.9), 'Pedestrian': (0.15, 0.5), 'Cyclist': (0.2, 0.7)}
ROAD_ALIGNED = {'Car': 0.8, 'Pedestrian': 0.0, 'Cyclist': 0.8}


@dataclass(frozen=True)
class SceneSpec:
    """What a scene contains.

    Attributes:
        classes (tuple): annotated classes; sizes/counts/reflectivity default per :data:`CLASS_SIZES` etc.
        sizes (dict): class -> mean (l, w, h) in metres.
        size_jitter (float): relative std-dev of each size (clipped to +-2.5 sigma).
        counts (dict): class -> (min, max) objects per frame (inclusive).
        distance (tuple): (min, max) distance of object centres from the sensor (m).
        road_aligned (dict): class -> probability that the heading is along the road (0 or pi, +-0.15 rad).
        reflectivity (dict): class -> (min, max) material reflectivity; keys 'ground', 'clutter' too.
        walls, poles, blocks (tuple): (min, max) clutter boxes of each kind per frame.
        margin (float): minimum BEV gap between boxes (m); the ego vehicle and the 6 m of lane
            ahead of it (x in [-2.5, 7.5], |y| < 1.2) stay free.
        max_attempts (int): placement tries per box before it is skipped (skips are counted).
        surface_inset (float): the visible surface of an annotated object is its box shrunk by this much
            on every side but the bottom (m), so range noise keeps its points inside the annotated box
            (as real annotations enclose the object with a little slack).
    """
    classes: tuple = DEFAULT_CLASSES
    sizes: dict = field(default_factory=lambda: dict(CLASS_SIZES))
    size_jitter: float = 0.06
    counts: dict = field(default_factory=lambda: dict(CLASS_COUNTS))
    distance: tuple = (5.0, 55.0)
    road_aligned: dict = field(default_factory=lambda: dict(ROAD_ALIGNED))
    reflectivity: dict = field(default_factory=lambda: dict(CLASS_REFLECTIVITY, ground=(0.05, 0.3),
                                                              clutter=(0.1, 0.8)))
    walls: tuple = (0, 3)
    poles: tuple = (0, 8)
    blocks: tuple = (0, 4)
    margin: float = 0.3
    max_attempts: int = 30
    surface_inset: float = 0.08

    def __post_init__(self):
        missing = [c for c in self.classes if c not in self.sizes or c not in self.counts]
        if missing:
            raise ValueError(f'SceneSpec: classes {missing} need entries in sizes and counts; '
                             f'got sizes for {sorted(self.sizes)} and counts for {sorted(self.counts)}')
        ranges = [('distance', self.distance)] + [(f'counts[{c!r}]', self.counts[c]) for c in self.classes]
        for name, (lo, hi) in ranges:
            if not 0 <= lo <= hi:
                raise ValueError(f'SceneSpec: {name}=({lo}, {hi}) is invalid; expected 0 <= min <= max')


@dataclass(frozen=True)
class SensorNoise:
    """Measurement imperfections: range noise std (m), dropout probability, intensity noise std."""
    range_noise: float = 0.02
    dropout: float = 0.05
    intensity_noise: float = 0.03

    def __post_init__(self):
        if self.range_noise < 0 or not 0 <= self.dropout < 1 or self.intensity_noise < 0:
            raise ValueError(f'SensorNoise: expected range_noise >= 0, 0 <= dropout < 1, intensity_noise >= 0; '
                             f'got {self}')


class _Placer:
    """Sequentially places boxes that keep a BEV gap to every box placed before (and to reserved areas)."""

    def __init__(self, margin, max_attempts, reserved):
        self.margin, self.max_attempts = margin, max_attempts
        self.occupied = np.asarray(reserved, dtype=np.float64).reshape(-1, 7)
        self.num_reserved = len(self.occupied)
        self.kinds, self.skipped = [], 0

    def _free(self, box):
        near = bev_circle_overlap(box[None], self.occupied, self.margin)[0]  # cheap numpy pre-filter
        if not near.any():
            return True
        exact = bev_overlap(torch.from_numpy(box[None]), torch.from_numpy(self.occupied[near]), self.margin)
        return not bool(exact.any())

    def place(self, propose, kind):
        for _ in range(self.max_attempts):
            box = np.asarray(propose(), dtype=np.float64)
            if self._free(box):
                self.occupied = np.concatenate([self.occupied, box[None]])
                self.kinds.append(kind)
                return True
        self.skipped += 1
        return False

    @property
    def boxes(self):
        """(K, 7) placed boxes (reserved areas excluded)."""
        return self.occupied[self.num_reserved:]


def _jittered(rng, mean, rel):
    mean = np.asarray(mean, dtype=np.float64)
    return mean * (1 + np.clip(rng.normal(0, rel, 3), -2.5 * rel, 2.5 * rel))


def sample_layout(rng, scene, lidar):
    """Draw the boxes of one scene.

    Args:
        rng (np.random.Generator): the frame's random stream.
        scene (SceneSpec), lidar (LidarSpec).
    Returns:
        dict: ``boxes`` (K, 7) float64 (annotated objects first, then clutter), ``labels`` (K,) int64
        (class index, ``len(classes)`` for clutter), ``num_objects`` M (the first M boxes are annotated),
        ``num_skipped`` boxes that found no free spot.
    """
    ground = -lidar.sensor_height
    az_lo, az_hi = np.deg2rad(lidar.horizontal_fov)
    # the ego vehicle and the lane just ahead of it stay free
    placer = _Placer(scene.margin, scene.max_attempts, reserved=[[2.5, 0.0, ground, 10.0, 2.4, 2.0, 0.0]])

    def polar(d_lo, d_hi, size, yaw):
        r, az = rng.uniform(d_lo, d_hi), rng.uniform(az_lo, az_hi)
        return [r * math.cos(az), r * math.sin(az), ground, *size, yaw]

    def heading(aligned_prob):
        if rng.random() < aligned_prob:
            return rng.choice([0.0, math.pi]) + rng.normal(0, 0.15)
        return rng.uniform(-math.pi, math.pi)

    for _ in range(rng.integers(scene.walls[0], scene.walls[1] + 1)):  # long thin walls beside the road
        size = (rng.uniform(4, 20), rng.uniform(0.2, 0.6), rng.uniform(1.0, 3.5))
        placer.place(lambda s=size: [rng.uniform(5, 60), rng.choice([-1, 1]) * rng.uniform(7, 25), ground,
                                     *s, rng.normal(0, 0.1)], 'clutter')
    for label, name in enumerate(scene.classes):
        lo, hi = scene.counts[name]
        for _ in range(rng.integers(lo, hi + 1)):
            size = _jittered(rng, scene.sizes[name], scene.size_jitter)
            aligned = scene.road_aligned.get(name, 0.0)
            placer.place(lambda s=size, a=aligned: polar(*scene.distance, s, heading(a)), label)
    for _ in range(rng.integers(scene.poles[0], scene.poles[1] + 1)):
        side = rng.uniform(0.15, 0.4)
        placer.place(lambda s=side: polar(3.0, 60.0, (s, s, rng.uniform(2.5, 6.0)), 0.0), 'clutter')
    for _ in range(rng.integers(scene.blocks[0], scene.blocks[1] + 1)):
        placer.place(lambda: polar(3.0, 50.0, (rng.uniform(0.6, 2.5), rng.uniform(0.6, 2.0), rng.uniform(0.4, 1.3)),
                                   rng.uniform(-math.pi, math.pi)), 'clutter')

    boxes, kinds = placer.boxes, placer.kinds
    objects = [i for i, k in enumerate(kinds) if k != 'clutter']
    clutter = [i for i, k in enumerate(kinds) if k == 'clutter']
    order = objects + clutter
    labels = np.array([kinds[i] if kinds[i] != 'clutter' else len(scene.classes) for i in order], dtype=np.int64)
    return dict(boxes=boxes[order].reshape(-1, 7), labels=labels, num_objects=len(objects),
                num_skipped=placer.skipped)


def render_frame(rng, scene, lidar, noise):
    """Sample a layout and ray-cast it into a point cloud.

    Returns:
        dict: ``points`` (N, 4) float32 ``[x, y, z, intensity]``; ``gt_bboxes_3d`` (M, 7) float32 bottom-centre
        lidar boxes; ``gt_labels_3d`` (M,) int64; ``pts_semantic_mask`` (N,) int64 (class of the hit object,
        ``len(classes)`` for ground and clutter); ``pts_instance_mask`` (N,) int64 (index of the hit box
        in ``gt_bboxes_3d``, -1 otherwise); ``clutter_bboxes_3d`` (K-M, 7) float32; ``num_skipped_objects``.
    """
    layout = sample_layout(rng, scene, lidar)
    boxes, labels, m = layout['boxes'], layout['labels'], layout['num_objects']
    surfaces = boxes.copy()
    inset = np.minimum(scene.surface_inset, 0.25 * surfaces[:m, 3:6])
    surfaces[:m, 3:5] -= 2 * inset[:, :2]
    surfaces[:m, 5] -= inset[:, 2]
    rays = cast_rays(lidar, surfaces)
    keep = np.isfinite(rays['distance'])
    keep &= rng.random(len(keep)) >= noise.dropout
    hit = rays['hit'][keep]
    distance = rays['distance'][keep] + rng.normal(0, noise.range_noise, int(keep.sum()))
    xyz = rays['directions'][keep] * distance[:, None]

    c = len(scene.classes)
    refl_ranges = [scene.reflectivity.get(scene.classes[l], scene.reflectivity['clutter']) if l < c
                   else scene.reflectivity['clutter'] for l in labels]
    box_refl = np.array([rng.uniform(*r) for r in refl_ranges])
    g_lo, g_hi = scene.reflectivity['ground']
    ground_refl = rng.uniform(g_lo, g_hi, len(hit))  # textured asphalt
    refl = np.where(hit == GROUND, ground_refl, box_refl[np.clip(hit, 0, None)] if len(box_refl) else 0.0)
    intensity = refl * (0.3 + 0.7 * rays['cos_incidence'][keep]) * np.exp(-distance / 200.0)
    intensity = np.clip(intensity + rng.normal(0, noise.intensity_noise, len(hit)), 0.0, 1.0)

    is_object = (hit >= 0) & (hit < m)
    semantic = np.where(is_object, labels[np.clip(hit, 0, None)] if len(labels) else c, c)
    instance = np.where(is_object, hit, -1)
    points = np.concatenate([xyz, intensity[:, None]], axis=1).astype(np.float32)
    return dict(points=points, gt_bboxes_3d=boxes[:m].astype(np.float32), gt_labels_3d=labels[:m].copy(),
                pts_semantic_mask=semantic.astype(np.int64), pts_instance_mask=instance.astype(np.int64),
                clutter_bboxes_3d=boxes[m:].astype(np.float32), num_skipped_objects=layout['num_skipped'])


def frame_rng(seed, split_code, index):
    """The random stream of one frame: independent per (base seed, split, index)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(split_code), int(index)]))


__all__ = ['SceneSpec', 'SensorNoise', 'LidarSpec', 'sample_layout', 'render_frame', 'frame_rng', 'DEFAULT_CLASSES']
