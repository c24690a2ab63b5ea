"""One simulated KITTI-like frame: street, road users, ray casting, measurement, camera crop, labels.

:func:`render_frame` draws a street (:mod:`.streetscape`), populates it (:mod:`.traffic`), casts the sensor's
rays (:mod:`.geometry`), turns the returns into points with range noise, ray drop and reflectance
(:class:`~.sensor.SensorNoise`), crops them to the camera's view and labels every road user that returned a
point as KITTI does: type, 3D box, 2D image box, truncation (share of the image box outside the image) and
occlusion level (0 / 1 / 2 from the share of the object's rays that reach it first: >= 0.8, >= 0.4, less).
"""
from dataclasses import dataclass, field

import numpy as np

from ...structures.camera import camera_fov_mask, image_boxes
from .geometry import PrimitiveSet, cast
from .sensor import ray_grid
from .roadside import build_static_world
from .streetscape import ROAD, SIDEWALK, STREET_TYPES, TERRAIN, draw_road
from .traffic import TrafficSpec, populate

OCCLUSION_LEVELS = (0.8, 0.4)  # visible share at or above which an object is occlusion level 0, 1 (else 2)


@dataclass(frozen=True)
class WorldSpec:
    """What streets look like.

    Attributes:
        street_types (dict): street type (:data:`~.streetscape.STREET_TYPES`) -> weight.
        traffic (dict): :class:`~.traffic.TrafficSpec` options.
        marking_reflectivity (tuple): (min, max) reflectance of lane markings.
    """
    # KITTI's frames often drive between parked rows: most of their well-seen cars stand within 4 m of the path
    street_types: dict = field(default_factory=lambda: dict(urban=0.3, residential=0.3, road=0.2, narrow=0.2))
    traffic: dict = field(default_factory=dict)
    marking_reflectivity: tuple = (0.45, 0.8)

    def __post_init__(self):
        unknown = sorted(set(self.street_types) - set(STREET_TYPES))
        weights = list(self.street_types.values())
        if unknown or not weights or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(f'WorldSpec: street_types must map some of {STREET_TYPES} to non-negative weights with '
                             f'a positive sum, got {self.street_types}')
        try:
            object.__setattr__(self, 'traffic_spec', TrafficSpec(**dict(self.traffic)))
        except TypeError as exc:
            raise TypeError(f'WorldSpec: bad traffic options {dict(self.traffic)}: {exc}') from None


_GRIDS = {}


def _grid(lidar):
    """The ray grid of a sensor (cached: it depends on the spec only)."""
    if lidar not in _GRIDS:
        grid = ray_grid(lidar)
        index = np.full((len(grid['elevation']), len(grid['azimuth'])), -1, dtype=np.int64)
        index[grid['beam'], grid['column']] = np.arange(len(grid['beam']))
        grid['index'] = index
        _GRIDS[lidar] = grid
    return _GRIDS[lidar]


def build_world(rng, world, lidar):
    """Draw a street and its road users; returns ``(primitives, road, objects, skipped)``."""
    names = list(world.street_types)
    p = np.array([world.street_types[n] for n in names], dtype=np.float64)
    kind = str(rng.choice(names, p=p / p.sum()))
    road = draw_road(rng, kind, lidar.sensor_height)
    prims = PrimitiveSet()
    occupancy = build_static_world(prims, rng, road)
    objects, skipped = populate(prims, rng, road, occupancy, world.traffic_spec)
    return prims, road, objects, skipped


def _ground_detail(rng, road, xyz, tag, world):
    """Surface relief (bumps, grass) on ground returns and the lane markings' reflectance (None elsewhere)."""
    s, q = road.to_road(xyz[:, 0], xyz[:, 1])
    phase = rng.uniform(0, 2 * np.pi, 4)
    bumps = 0.012 * np.sin(0.7 * s + phase[0]) * np.sin(0.9 * q + phase[1]) + \
        0.008 * np.sin(2.3 * s + phase[2]) * np.sin(1.7 * q + phase[3])
    z = xyz[:, 2] + np.where((tag == ROAD) | (tag == SIDEWALK), bumps, 0.0)
    grass = tag == TERRAIN
    z = z + np.where(grass, 3 * bumps + np.abs(rng.normal(0, 0.04, len(z))), 0.0)
    lines = []
    if road.lanes_left > 0:
        lines.append((0.0, True))  # centre line, dashed
    lines += [(-(k + 1) * road.lane_width, True) for k in range(road.lanes_right - 1)]
    lines += [((k + 1) * road.lane_width, True) for k in range(road.lanes_left - 1)]
    lines += [(road.edge_right + road.parking_right + 0.2, False), (road.edge_left - road.parking_left - 0.2, False)]
    marked = np.zeros(len(z), dtype=bool)
    for offset, dashed in lines:
        on = np.abs(q - offset) < 0.07
        if dashed:
            on &= (s % 9.0) < 3.0
        marked |= on
    marked &= (tag == ROAD) & ~road.in_cross(s)
    paint = np.where(marked, rng.uniform(*world.marking_reflectivity), np.nan)
    return z, paint


def render_frame(rng, world, lidar, noise, classes):
    """Simulate one frame.

    Args:
        rng (np.random.Generator): the frame's random stream; world (WorldSpec); lidar (LidarSpec);
        noise (SensorNoise); classes (sequence[str]): the annotated classes (targets).
    Returns:
        dict: ``points`` (N, 4) float32 ``[x, y, z, reflectance]``; ``gt_bboxes_3d`` (M, 7) float32 and
        ``gt_labels_3d`` (M,) int64 of the target classes' objects that returned points; ``pts_semantic_mask``
        (N,) (class index, ``len(classes)`` = anything else) and ``pts_instance_mask`` (N,) (row of
        ``gt_bboxes_3d`` or -1); ``kitti_annos`` (every labelled object, see :func:`kitti_annotations`);
        ``lidar2img`` (4, 4); ``num_skipped_objects`` (road users that found no free spot); ``street`` (type).
    """
    prims, road, objects, skipped = build_world(rng, world, lidar)
    grid = _grid(lidar)
    hits = cast(prims, grid['directions'], grid['index'], grid['elevation'], grid['azimuth'], rng)
    distance = hits['distance']
    finite = np.isfinite(distance) & (distance >= lidar.min_range) & (distance <= lidar.max_range)
    refl, cos_inc = hits['reflectivity'], hits['cos_incidence']
    strength = refl * (0.3 + 0.7 * cos_inc)
    detect_p = np.minimum(1.0, strength / np.maximum(noise.detection_floor * (distance / 50.0) ** 2, 1e-9))
    keep = finite & (rng.random(len(distance)) < detect_p) & (rng.random(len(distance)) >= noise.dropout)
    rays = np.flatnonzero(keep)
    r = distance[rays] + rng.normal(0, noise.range_noise, len(rays))
    xyz = grid['directions'][rays] * r[:, None]
    tag = hits['tag'][rays]
    xyz[:, 2], paint = _ground_detail(rng, road, xyz, tag, world)
    surface = np.where(np.isnan(paint), refl[rays], paint) * np.exp(rng.normal(0, noise.texture, len(rays)))
    intensity = surface * cos_inc[rays] ** hits['gloss'][rays] + rng.normal(0, noise.intensity_noise, len(rays))
    zero = (intensity < noise.zero_below) | (rng.random(len(rays)) < noise.zero_share)
    intensity = np.where(zero, 0.0, np.round(np.clip(intensity, 0.0, 0.99), 2))
    owner = hits['owner'][rays]
    in_view = camera_fov_mask(xyz, lidar.lidar2img, lidar.image_size) if lidar.camera_fov \
        else np.ones(len(xyz), dtype=bool)
    xyz, intensity, owner = xyz[in_view], intensity[in_view], owner[in_view]

    annos = kitti_annotations(objects, owner, hits, lidar)
    targets = [i for i, name in enumerate(annos['name']) if name in classes]
    row_of_owner = np.full(len(objects) + 1, -1, dtype=np.int64)
    row_of_owner[annos['owner'][targets]] = np.arange(len(targets))
    instance = row_of_owner[np.where(owner >= 0, owner, len(objects))]
    labels = np.array([classes.index(annos['name'][i]) for i in targets], dtype=np.int64)
    semantic = np.where(instance >= 0, labels[np.maximum(instance, 0)] if len(labels) else len(classes),
                        len(classes))
    points = np.concatenate([xyz, intensity[:, None]], axis=1).astype(np.float32)
    return dict(points=points, gt_bboxes_3d=annos['box_lidar'][targets].astype(np.float32).reshape(-1, 7),
                gt_labels_3d=labels, pts_semantic_mask=semantic.astype(np.int64),
                pts_instance_mask=instance.astype(np.int64), kitti_annos=annos, lidar2img=lidar.lidar2img,
                num_skipped_objects=int(skipped), street=road.kind)


def kitti_annotations(objects, point_owner, hits, lidar):
    """KITTI-style labels of the road users that returned at least one point in the camera's view.

    Returns:
        dict of arrays over the labelled objects: ``name`` (K,) str, ``box_lidar`` (K, 7), ``bbox`` (K, 4) image
        box, ``truncated`` (K,), ``occluded`` (K,) int in {0, 1, 2}, ``num_points`` (K,), ``owner`` (K,).
    """
    counts = np.bincount(point_owner[point_owner >= 0], minlength=len(objects))[:len(objects)]
    seen = hits['seen_owner']
    visible = np.bincount(seen[seen >= 0], minlength=len(objects))[:len(objects)]
    alone = np.zeros(len(objects), dtype=np.int64)
    alone[:len(hits['owner_rays'])] = hits['owner_rays'][:len(objects)]
    keep = np.flatnonzero(counts > 0)
    boxes = np.array([objects[i]['box'] for i in keep], dtype=np.float64).reshape(-1, 7)
    bbox, truncated = image_boxes(boxes, lidar.lidar2img, lidar.image_size)
    share = visible[keep] / np.maximum(alone[keep], 1)
    occluded = np.where(share >= OCCLUSION_LEVELS[0], 0, np.where(share >= OCCLUSION_LEVELS[1], 1, 2))
    return dict(name=np.array([objects[i]['name'] for i in keep], dtype=object), box_lidar=boxes, bbox=bbox,
                truncated=np.round(truncated, 2), occluded=occluded.astype(np.int64), num_points=counts[keep],
                owner=keep.astype(np.int64))


__all__ = ['WorldSpec', 'build_world', 'render_frame', 'kitti_annotations', 'OCCLUSION_LEVELS']
