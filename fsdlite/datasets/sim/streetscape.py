"""The frame of a simulated street (road coordinates, ground height) and its ground and buildings.

Everything is laid out in *road coordinates* ``(s, q)``: ``s`` along the road, ``q`` to its left, with the ego
sensor at ``s = 0`` in one of the right-hand lanes (traffic drives on the right, as in KITTI's Karlsruhe).
:class:`Road` maps them to the lidar frame (the road turned by ``yaw`` against the ego heading) and
gives the ground height anywhere (a grade along the road and a cross slope -- in KITTI's scans the ground ahead rises
by about 0.5 deg on average, from the road and the sensor's mounting alike --, curbs, and embankments beside it).

Street types (drawn per frame): ``urban`` (facades close behind the sidewalk, parked cars along both curbs),
``residential`` (houses set back behind hedges, fences, low walls, garden trees), ``road`` (wider roads
between vegetation, walls, noise barriers and fields) and ``narrow`` (one lane between parked rows and
facades). A cross street makes an intersection in some frames.
"""
from dataclasses import dataclass, field

import numpy as np

from . import materials
from .geometry import rotation

ROAD, SIDEWALK, TERRAIN = 1, 2, 3  # surface tags of the ground (geometry tag); 0 = anything else
STREET_TYPES = ('urban', 'residential', 'road', 'narrow')


#: spread of the street's direction against the ego heading (radians): in KITTI's labelled frames the cars of one
#: frame share an orientation (|yaw - the frame's median| is ~0.5 deg) that varies from frame to frame by up to
#: ~18 deg (turns, bends): |car yaw| quantiles 50/75/90 % of 7/13/18 deg (``fsdlite.datasets.sim.statistics``)
ROAD_YAW_SIGMA = 0.13


@dataclass
class Road:
    """Cross-section and placement of the road (see the module docstring for coordinates).

    Attributes:
        yaw (float): road direction in the lidar frame (radians); grade (float): rise per metre along ``s``;
        cross (float): rise per metre along ``q`` (across the road, from the sensor's position).
        ego_q (float): the sensor's lateral position (m, road coordinates); height (float): sensor height.
        lanes_right, lanes_left (int): driving lanes with and against the ego direction; lane_width (float).
        parking_right, parking_left (float): width of the parking strip along each curb (0: none).
        curb (float): curb height; sidewalk_right, sidewalk_left (float): sidewalk widths.
        cross_s (float | None), cross_width (float): an intersecting street at ``s = cross_s``.
    """
    kind: str
    yaw: float
    grade: float
    cross: float
    ego_q: float
    height: float
    lanes_right: int
    lanes_left: int
    lane_width: float
    parking_right: float
    parking_left: float
    curb: float
    sidewalk_right: float
    sidewalk_left: float
    cross_s: object = None
    cross_width: float = 0.0
    embankment: dict = field(default_factory=dict)

    @property
    def edge_right(self):
        """q of the right curb (negative)."""
        return -(self.lanes_right * self.lane_width + self.parking_right)

    @property
    def edge_left(self):
        """q of the left curb."""
        return self.lanes_left * self.lane_width + self.parking_left

    def edge(self, side):
        return self.edge_left if side > 0 else self.edge_right

    def sidewalk(self, side):
        return self.sidewalk_left if side > 0 else self.sidewalk_right

    def to_world(self, s, q):
        """Lidar-frame (x, y) of road coordinates (arrays broadcast)."""
        c, si = np.cos(self.yaw), np.sin(self.yaw)
        q = np.asarray(q, dtype=np.float64) - self.ego_q
        s = np.asarray(s, dtype=np.float64)
        return s * c - q * si, s * si + q * c

    def to_road(self, x, y):
        """Road coordinates (s, q) of lidar-frame (x, y)."""
        c, si = np.cos(self.yaw), np.sin(self.yaw)
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        return x * c + y * si, -x * si + y * c + self.ego_q

    def ground(self, s, q):
        """Height (lidar z) of the ground surface at road coordinates: road, curb-raised sidewalks, embankments."""
        s, q = np.asarray(s, dtype=np.float64), np.asarray(q, dtype=np.float64)
        z = -self.height + self.grade * s + self.cross * (q - self.ego_q)
        outside = (q > self.edge_left) | (q < self.edge_right)
        on_cross = self.in_cross(s)
        z = z + np.where(outside & ~on_cross, self.curb, 0.0)
        for side, (start, slope) in self.embankment.items():
            beyond = (q - start) * side
            z = z + np.where((beyond > 0) & ~on_cross, beyond * slope, 0.0)
        return z

    def in_cross(self, s):
        if self.cross_s is None:
            return np.zeros(np.shape(s), dtype=bool)
        return np.abs(np.asarray(s) - self.cross_s) < 0.5 * self.cross_width


def draw_road(rng, kind, sensor_height):
    """Draw a :class:`Road` of street type ``kind``."""
    lane = rng.uniform(2.9, 3.6)
    if kind == 'narrow':
        lanes_r, lanes_l = 1, 0
    elif kind == 'road':
        lanes_r, lanes_l = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    else:
        lanes_r, lanes_l = 1, int(rng.integers(0, 2)) if kind == 'residential' else int(rng.integers(1, 3))
    park = {'urban': 0.85, 'residential': 0.7, 'road': 0.15, 'narrow': 0.95}[kind]
    parking_r = rng.uniform(2.0, 2.6) if rng.random() < park else 0.0
    parking_l = rng.uniform(2.0, 2.6) if rng.random() < park else 0.0
    ego_lane = int(rng.integers(0, lanes_r))
    ego_q = -(ego_lane + 0.5) * lane + rng.normal(0, 0.25)
    walk = (1.2, 3.5) if kind != 'road' else (0.0, 2.0)
    road = Road(kind=kind, yaw=float(rng.normal(0, ROAD_YAW_SIGMA)),
                grade=float(np.clip(rng.normal(0.008, 0.015), -0.05, 0.06)),
                cross=float(np.clip(rng.normal(0, 0.02), -0.05, 0.05)),
                ego_q=ego_q, height=sensor_height, lanes_right=lanes_r, lanes_left=lanes_l, lane_width=lane,
                parking_right=parking_r, parking_left=parking_l, curb=rng.uniform(0.08, 0.16),
                sidewalk_right=rng.uniform(*walk), sidewalk_left=rng.uniform(*walk))
    if rng.random() < (0.4 if kind != 'road' else 0.2):
        road.cross_s, road.cross_width = float(rng.uniform(12, 55)), float(rng.uniform(7, 14))
    if kind == 'road':
        for side in (1, -1):
            if rng.random() < 0.5:
                start = road.edge(side) + side * road.sidewalk(side) + side * rng.uniform(0.5, 4)
                road.embankment[side] = (start, float(rng.choice([-1, 1]) * rng.uniform(0.1, 0.45)))
    return road


class Occupancy:
    """Footprints already taken (oriented rectangles in the lidar frame), for non-overlapping placement."""

    def __init__(self):
        self.rects = np.zeros((0, 5))  # cx, cy, half length, half width, yaw

    def free(self, cx, cy, length, width, yaw, margin=0.2):
        """True when the rectangle (grown by ``margin``) overlaps no footprint (separating-axis test)."""
        if not len(self.rects):
            return True
        r = self.rects
        near = np.hypot(r[:, 0] - cx, r[:, 1] - cy) < np.hypot(r[:, 2], r[:, 3]) + 0.5 * np.hypot(length, width) \
            + margin
        if not near.any():
            return True
        r = r[near]
        a = np.array([cx, cy, 0.5 * length + margin, 0.5 * width + margin, yaw])
        axes = [np.stack([np.cos(a[4]), np.sin(a[4])]), np.stack([-np.sin(a[4]), np.cos(a[4])])]
        axes = [np.broadcast_to(v, (len(r), 2)) for v in axes]
        axes += [np.stack([np.cos(r[:, 4]), np.sin(r[:, 4])], 1), np.stack([-np.sin(r[:, 4]), np.cos(r[:, 4])], 1)]
        d = r[:, :2] - a[:2]
        separated = np.zeros(len(r), dtype=bool)
        for ax in axes:
            dist = np.abs((d * ax).sum(1))
            ra = a[2] * np.abs(ax @ [np.cos(a[4]), np.sin(a[4])]) + a[3] * np.abs(ax @ [-np.sin(a[4]), np.cos(a[4])])
            rb = r[:, 2] * np.abs((ax * np.stack([np.cos(r[:, 4]), np.sin(r[:, 4])], 1)).sum(1)) + \
                r[:, 3] * np.abs((ax * np.stack([-np.sin(r[:, 4]), np.cos(r[:, 4])], 1)).sum(1))
            separated |= dist > ra + rb
        return bool(separated.all())

    def take(self, cx, cy, length, width, yaw):
        self.rects = np.concatenate([self.rects, [[cx, cy, 0.5 * length, 0.5 * width, yaw]]])


def slab(prims, road, s0, s1, q0, q1, top_offset, material, tag, thickness=2.0, roll=0.0):
    """A ground slab over s in [s0, s1], q in [q0, q1] whose top follows the road's grade and cross slope (+
    ``top_offset``, and ``roll`` more across)."""
    s_c, q_c = 0.5 * (s0 + s1), 0.5 * (q0 + q1)
    pitch = -np.arctan(road.grade)
    roll = roll + np.arctan(road.cross)
    rot = rotation(road.yaw, pitch, roll)
    x, y = road.to_world(s_c, q_c)
    top = np.array([x, y, -road.height + road.grade * s_c + road.cross * (q_c - road.ego_q) + top_offset])
    centre = top - 0.5 * thickness * rot[:, 2]
    length = (s1 - s0) * np.sqrt(1 + road.grade ** 2)
    prims.add_box(centre, [length, (q1 - q0) / np.cos(roll), thickness], road.yaw, material, tag=tag, pitch=pitch,
                  roll=roll)


S_NEAR, S_FAR = -15.0, 150.0


def spans(road, s0=S_NEAR, s1=S_FAR, gap=0.0):
    """[s0, s1] split around the cross street (grown by ``gap``)."""
    if road.cross_s is None:
        return [(s0, s1)]
    c0, c1 = road.cross_s - 0.5 * road.cross_width - gap, road.cross_s + 0.5 * road.cross_width + gap
    return [(a, b) for a, b in ((s0, min(s1, c0)), (max(s0, c1), s1)) if b > a]


def add_ground(prims, rng, road):
    """Road surface, curbs and sidewalks, terrain beyond (flat or an embankment), the cross street."""
    asphalt = materials.asphalt(rng)
    slab(prims, road, S_NEAR, S_FAR, road.edge_right, road.edge_left, 0.0, asphalt, ROAD)
    if road.cross_s is not None:
        c0, c1 = road.cross_s - 0.5 * road.cross_width, road.cross_s + 0.5 * road.cross_width
        slab(prims, road, c0, c1, -80, 80, 0.0, asphalt, ROAD)
    for side in (1, -1):
        edge, walk = road.edge(side), road.sidewalk(side)
        outer = edge + side * walk
        concrete, terrain = materials.concrete(rng), materials.terrain(rng)
        for s0, s1 in spans(road):
            if walk > 0:
                slab(prims, road, s0, s1, min(edge, outer), max(edge, outer), road.curb, concrete, SIDEWALK)
            far = outer + side * 80
            if side in road.embankment:
                start, slope = road.embankment[side]
                slab(prims, road, s0, s1, min(outer, start), max(outer, start), road.curb, terrain, TERRAIN)
                roll = np.arctan(slope) * side
                width = 40.0
                q_mid = start + side * 0.5 * width
                slab(prims, road, s0, s1, q_mid - 0.5 * width, q_mid + 0.5 * width,
                      road.curb + 0.5 * width * slope, terrain, TERRAIN, roll=roll)
            else:
                slab(prims, road, s0, s1, min(outer, far), max(outer, far), road.curb, terrain, TERRAIN)


def _facade_segment(prims, road, side, s0, s1, setback, depth, height, rng):
    """One building: a block whose front face runs along the road; windows drop returns."""
    q_front = road.edge(side) + side * (road.sidewalk(side) + setback)
    q_c = q_front + side * 0.5 * depth
    s_c = 0.5 * (s0 + s1)
    x, y = road.to_world(s_c, q_c)
    z0 = float(road.ground(s_c, q_front + side * 0.1))
    fx, fy = road.to_world(s0, q_front)
    facade = (np.array([fx, fy, z0]), road.yaw, rng.uniform(2.5, 4.0), rng.uniform(2.8, 3.4))
    prims.add_box([x, y, z0 + 0.5 * height - 0.5], [s1 - s0, depth, height + 1.0], road.yaw, materials.facade(rng),
                  facade=facade)


def add_buildings(prims, rng, road):
    """Rows of facades (with gaps, steps and recesses) along both sides, by street type."""
    setbacks = {'urban': (0.3, 4.0), 'narrow': (0.0, 0.8), 'residential': (3.0, 12.0), 'road': (8.0, 30.0)}
    heights = {'urban': (8.0, 22.0), 'narrow': (7.0, 16.0), 'residential': (4.5, 9.0), 'road': (4.0, 12.0)}
    presence = {'urban': 0.95, 'narrow': 1.0, 'residential': 0.85, 'road': 0.3}[road.kind]
    for side in (1, -1):
        if rng.random() > presence:
            continue
        base_setback = rng.uniform(*setbacks[road.kind])
        for s0, s1 in spans(road, gap=1.0):
            s = s0
            while s < s1:
                length = rng.uniform(6, 30) if road.kind != 'residential' else rng.uniform(7, 14)
                end = min(s + length, s1)
                if end - s > 2.0:
                    setback = base_setback + (rng.uniform(0, 1.2) if rng.random() < 0.4 else 0.0)
                    _facade_segment(prims, road, side, s, end, setback, rng.uniform(8, 14),
                                    rng.uniform(*heights[road.kind]), rng)
                gap_p = {'urban': 0.2, 'narrow': 0.1, 'residential': 0.7, 'road': 0.6}[road.kind]
                s = end + (rng.uniform(2, 12) if rng.random() < gap_p else 0.0)


__all__ = ['Road', 'Occupancy', 'draw_road', 'add_ground', 'add_buildings', 'spans', 'slab', 'STREET_TYPES', 'ROAD',
           'SIDEWALK', 'TERRAIN', 'S_NEAR', 'S_FAR']
