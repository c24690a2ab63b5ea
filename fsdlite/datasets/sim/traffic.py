"""Road users of a simulated street: parked rows, moving traffic, cross traffic, pedestrians and cyclists.

Vehicles are cars, vans, trucks, trams and trailers ('Misc'); only the dataset's classes become targets, the
others are what KITTI labels them (Van is a neighbouring class of Car, the rest are distractors). Placement
is in road coordinates (:class:`~.streetscape.Road`) and keeps objects apart with an
:class:`~.streetscape.Occupancy` of their footprints; an object that finds no free spot is skipped and counted.
"""
from dataclasses import dataclass, field

import numpy as np

from .shapes import BUILDERS

# nominal footprints (length, width) used to test a spot before the object is drawn
FOOTPRINT = dict(Car=(4.8, 1.95), Van=(5.9, 2.1), Truck=(12.5, 2.6), Tram=(30.5, 2.7), Misc=(4.6, 2.4),
                 Pedestrian=(0.9, 0.8), Cyclist=(1.9, 0.8))
VIEW_MARGIN = 6.0  # objects farther than this outside the camera's horizontal view are not built


@dataclass(frozen=True)
class TrafficSpec:
    """How busy a street is.

    Attributes:
        parked (dict): street type -> probability that a parking slot along a curb is taken.
        vehicle_mix (dict): parked / moving vehicle type -> weight.
        moving_gap (tuple): (min, max) free gap between moving vehicles in a lane (m).
        pedestrians, cyclists (tuple): (min, max) per frame.
        max_s (float): objects are placed up to this distance along the road (m).
    """
    parked: dict = field(default_factory=lambda: dict(urban=0.7, residential=0.5, road=0.35, narrow=0.75))
    vehicle_mix: dict = field(default_factory=lambda: dict(Car=0.86, Van=0.08, Truck=0.04, Misc=0.02))
    moving_gap: tuple = (8.0, 50.0)
    pedestrians: tuple = (0, 8)
    cyclists: tuple = (0, 3)
    max_s: float = 85.0

    def __post_init__(self):
        for name in ('moving_gap', 'pedestrians', 'cyclists'):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f'TrafficSpec: {name}=({lo}, {hi}) is invalid; expected 0 <= min <= max')
        if not self.vehicle_mix or min(self.vehicle_mix.values()) < 0 or sum(self.vehicle_mix.values()) <= 0:
            raise ValueError(f'TrafficSpec: vehicle_mix needs non-negative weights with a positive sum, got '
                             f'{self.vehicle_mix}')
        unknown = sorted(set(self.vehicle_mix) - set(BUILDERS))
        if unknown:
            raise ValueError(f'TrafficSpec: vehicle_mix names unknown types {unknown}; expected some of '
                             f'{sorted(BUILDERS)}')


class Traffic:
    """Places road users into a frame's primitives; :attr:`objects` lists their labels and owner ids."""

    def __init__(self, prims, rng, road, occupancy, spec):
        self.prims, self.rng, self.road, self.occupancy, self.spec = prims, rng, road, occupancy, spec
        self.objects, self.skipped = [], 0
        names = list(spec.vehicle_mix)
        weights = np.array([spec.vehicle_mix[n] for n in names], dtype=np.float64)
        self._vehicle_names, self._vehicle_p = names, weights / weights.sum()
        # the ego vehicle, and the few metres beside and ahead of it where KITTI's scans rarely hold anything
        occupancy.take(2.0, 0.0, 10.0, 7.0, 0.0)

    def vehicle(self):
        return str(self.rng.choice(self._vehicle_names, p=self._vehicle_p))

    def place(self, name, s, q, yaw_rel, tries=1, jitter=0.0):
        """Build ``name`` at road coordinates (s, q) heading ``road.yaw + yaw_rel`` if its footprint is free."""
        road = self.road
        for _ in range(tries):
            x, y = (float(v) for v in road.to_world(s, q))
            if x < -2.0 or abs(y) > 1.1 * max(x, 0.0) + VIEW_MARGIN:  # outside the camera's view
                return None
            yaw = road.yaw + yaw_rel
            length, width = FOOTPRINT[name]
            if self.occupancy.free(x, y, length, width, yaw, margin=0.15):
                owner = len(self.objects)
                z0 = float(road.ground(s, q))
                label = BUILDERS[name](self.prims, self.rng, x, y, z0, yaw, owner)
                box = label['box']
                self.occupancy.take(box[0], box[1], box[3], box[4], box[6])
                label['owner'] = owner
                self.objects.append(label)
                return label
            s, q = s + self.rng.normal(0, jitter), q + self.rng.normal(0, jitter)
        self.skipped += 1
        return None

    def parked_rows(self):
        """Vehicles along both curbs (parallel, or angled / perpendicular bays) and in driveways."""
        rng, road = self.rng, self.road
        density = self.spec.parked.get(road.kind, 0.5)
        for side in (1, -1):
            width = road.parking_left if side > 0 else road.parking_right
            if width <= 0:
                continue
            curb = road.edge(side)
            with_traffic = 0.0 if side < 0 or road.lanes_left == 0 else np.pi
            bays = rng.random() < 0.12
            s = -10.0 + rng.uniform(0, 6)
            while s < self.spec.max_s:
                if road.in_cross(s + np.arange(-3, 4)).any():
                    s += 3.0
                    continue
                if rng.random() < density:
                    name = self.vehicle() if not bays else 'Car'
                    if bays:
                        angle = rng.choice([np.pi / 2, np.pi / 3]) * rng.choice([1, -1])
                        self.place(name, s, curb - side * 2.4, angle + rng.normal(0, 0.05))
                        s += rng.uniform(2.5, 3.0)
                        continue
                    yaw = with_traffic if rng.random() < 0.85 else np.pi - with_traffic
                    label = self.place(name, s, curb - side * rng.uniform(1.0, 1.35), yaw + rng.normal(0, 0.03))
                    s += (label['box'][3] if label else 4.0) + rng.uniform(0.4, 2.5)
                else:
                    s += rng.uniform(3.0, 9.0)

    def moving(self):
        """Vehicles in the driving lanes (with and against the ego direction) and on the cross street."""
        rng, road = self.rng, self.road
        lanes = [(-(k + 0.5) * road.lane_width, 0.0) for k in range(road.lanes_right)]
        lanes += [((k + 0.5) * road.lane_width, np.pi) for k in range(road.lanes_left)]
        lo, hi = self.spec.moving_gap
        for q, yaw in lanes:
            if rng.random() < 0.35:  # an empty lane (KITTI's lane ahead is often free)
                continue
            s = rng.uniform(-10, 25)
            while s < self.spec.max_s:
                name = self.vehicle() if rng.random() > 0.02 else 'Tram'
                label = self.place(name, s, q + rng.normal(0, 0.2), yaw + rng.normal(0, 0.02))
                s += (label['box'][3] if label else 5.0) + rng.uniform(lo, hi)
        if road.cross_s is not None:
            for offset, yaw in ((-0.25 * road.cross_width, np.pi / 2), (0.25 * road.cross_width, -np.pi / 2)):
                q = rng.uniform(-40, -10)
                while q < 40:
                    if rng.random() < 0.5:
                        self.place(self.vehicle(), road.cross_s + offset + rng.normal(0, 0.2), q,
                                   yaw + rng.normal(0, 0.03))
                    q += rng.uniform(6, 20)

    def people(self):
        """Pedestrians on the sidewalks and crossings, cyclists along the road edges."""
        rng, road = self.rng, self.road
        for _ in range(int(rng.integers(self.spec.pedestrians[0], self.spec.pedestrians[1] + 1))):
            side = rng.choice([1, -1])
            walk = road.sidewalk(side)
            if road.cross_s is not None and rng.random() < 0.3:  # on a crossing
                s = road.cross_s + rng.choice([-1, 1]) * (0.5 * road.cross_width - rng.uniform(0.5, 2.0))
                q = rng.uniform(road.edge_right, road.edge_left)
                yaw = rng.choice([np.pi / 2, -np.pi / 2]) + rng.normal(0, 0.2)
            else:
                s = rng.uniform(2, 55)
                q = road.edge(side) + side * rng.uniform(0.3, max(walk, 0.6))
                along = rng.random() < 0.7
                yaw = rng.choice([0.0, np.pi]) + rng.normal(0, 0.3) if along else rng.uniform(-np.pi, np.pi)
            self.place('Pedestrian', s, q, yaw, tries=4, jitter=0.8)
        for _ in range(int(rng.integers(self.spec.cyclists[0], self.spec.cyclists[1] + 1))):
            side = -1 if rng.random() < 0.75 else 1
            q = road.edge(side) - side * rng.uniform(0.5, 1.2) if rng.random() < 0.8 else \
                road.edge(side) + side * rng.uniform(0.5, max(road.sidewalk(side), 0.6))
            yaw = (0.0 if side < 0 else np.pi) + rng.normal(0, 0.08)
            self.place('Cyclist', rng.uniform(3, 60), q, yaw, tries=4, jitter=1.0)


def populate(prims, rng, road, occupancy, spec):
    """Place every road user of a frame; returns ``(objects, skipped)``."""
    traffic = Traffic(prims, rng, road, occupancy, spec)
    traffic.moving()
    traffic.parked_rows()
    traffic.people()
    return traffic.objects, traffic.skipped


__all__ = ['TrafficSpec', 'Traffic', 'populate', 'FOOTPRINT']
