"""What stands beside a simulated street: trees, bushes, grass, hedges, walls, fences, barriers, poles, signs,
street lights, bins, benches, cabinets, parked bicycles, far tree lines and hills (road coordinates:
:mod:`.streetscape`).

Vegetation is porous (:data:`~.geometry.VOLUME`): rays enter it a random depth, and bushes are clumps of several lobes,
so it returns the scattered, irregular points real foliage gives rather than a smooth shell.
"""
import numpy as np

from . import materials
from .geometry import prism_planes, rotation
from .shapes import add_bicycle
from .streetscape import S_FAR, S_NEAR, TERRAIN, Occupancy, add_buildings, add_ground, slab, spans


def _tree(prims, rng, road, s, q, scale=1.0, base=0.0):
    """A trunk under a porous crown (one or two lobes); returns its (x, y, trunk radius)."""
    x, y = road.to_world(s, q)
    z0 = float(road.ground(s, q)) + base
    trunk_h = rng.uniform(1.6, 3.5) * scale
    r_trunk = rng.uniform(0.08, 0.25) * scale
    prims.add_polyhedron(prism_planes([x, y, z0 + 0.5 * trunk_h + 0.3], r_trunk, trunk_h + 0.6),
                         [x - r_trunk * 1.1, y - r_trunk * 1.1, z0 - 0.3, x + r_trunk * 1.1, y + r_trunk * 1.1,
                          z0 + trunk_h + 0.6], materials.bark(rng))
    foliage = materials.foliage(rng, rng.uniform(0.25, 0.9))
    for lobe in range(int(rng.integers(1, 3))):
        rxy, rz = rng.uniform(1.0, 3.5) * scale, rng.uniform(1.2, 3.2) * scale
        prims.add_ellipsoid([x + rng.normal(0, 0.5 * lobe + 0.2), y + rng.normal(0, 0.5 * lobe + 0.2),
                             z0 + trunk_h + rz * rng.uniform(0.7, 0.95)],
                            [rxy, rxy * rng.uniform(0.7, 1.2), rz], rng.uniform(0, np.pi), foliage)
    return x, y, r_trunk


def _bush(prims, rng, road, s, q, base=0.0):
    """A clump of two to five porous lobes."""
    x, y = road.to_world(s, q)
    z0 = float(road.ground(s, q)) + base
    foliage = materials.foliage(rng, rng.uniform(0.08, 0.3))
    size = rng.uniform(0.4, 1.4)
    for _ in range(int(rng.integers(2, 6))):
        r = size * rng.uniform(0.4, 0.9)
        h = rng.uniform(0.3, 1.1) * size + 0.2
        prims.add_ellipsoid([x + rng.normal(0, 0.5 * size), y + rng.normal(0, 0.5 * size), z0 + 0.6 * h],
                            [r, r * rng.uniform(0.6, 1.4), h], rng.uniform(0, np.pi), foliage)


def _grass(prims, rng, road, s, q, length, width):
    """Tall grass or weeds: a low porous layer on the terrain."""
    x, y = road.to_world(s, q)
    z0 = float(road.ground(s, q))
    h = rng.uniform(0.1, 0.6)
    prims.add_box([x, y, z0 + 0.5 * h], [length, width, h], road.yaw + rng.normal(0, 0.3),
                  materials.foliage(rng, rng.uniform(0.05, 0.2)))


def _hedge(prims, rng, road, s, q, length):
    """A hedge of uneven height and depth (several porous sections)."""
    h, w = rng.uniform(0.8, 2.2), rng.uniform(0.6, 1.2)
    foliage = materials.foliage(rng, rng.uniform(0.1, 0.3))
    start = s
    while start < s + length:
        piece = min(rng.uniform(1.0, 4.0), s + length - start)
        hh, ww = h * rng.uniform(0.85, 1.15), w * rng.uniform(0.8, 1.2)
        x, y = road.to_world(start + 0.5 * piece, q)
        z0 = float(road.ground(start + 0.5 * piece, q))
        prims.add_box([x, y, z0 + 0.5 * hh], [piece, ww, hh], road.yaw + rng.normal(0, 0.03), foliage)
        start += piece


def _furniture_box(prims, rng, road, s, q, size, material, occupancy):
    """A bench, planter, cabinet or bin: a box on the ground, its footprint taken."""
    x, y = road.to_world(s, q)
    z0 = float(road.ground(s, q))
    yaw = road.yaw + rng.choice([0.0, np.pi / 2]) + rng.normal(0, 0.05)
    prims.add_box([x, y, z0 + 0.5 * size[2]], size, yaw, material)
    occupancy.take(x, y, size[0] + 0.3, size[1] + 0.3, yaw)


def _pole(prims, rng, road, s, q, height, radius, material):
    x, y = road.to_world(s, q)
    z0 = float(road.ground(s, q))
    prims.add_polyhedron(prism_planes([x, y, z0 + 0.5 * height], radius, height),
                         [x - 1.1 * radius, y - 1.1 * radius, z0, x + 1.1 * radius, y + 1.1 * radius, z0 + height],
                         material)
    return x, y, z0


def _street_light(prims, rng, road, side, s, q):
    height = rng.uniform(6, 9)
    x, y, z0 = _pole(prims, rng, road, s, q, height, rng.uniform(0.07, 0.14), materials.metal(rng))
    arm = rng.uniform(1.0, 2.5)
    ax, ay = road.to_world(s, q - side * 0.5 * arm)
    prims.add_box([ax, ay, z0 + height - 0.1], [0.12, arm, 0.1], road.yaw, materials.metal(rng))


def _sign(prims, rng, road, side, s, q):
    height = rng.uniform(2.2, 3.4)
    x, y, z0 = _pole(prims, rng, road, s, q, height, rng.uniform(0.03, 0.05), materials.metal(rng))
    size = rng.uniform(0.5, 0.9)
    prims.add_box([x, y, z0 + height - 0.5 * size], [0.04, size, size], road.yaw + rng.normal(0, 0.2),
                  materials.retro(rng))


def add_roadside(prims, rng, road, occupancy):
    """Street trees, lights, signs, bollards, bins, parked bicycles on the sidewalks; hedges, fences, walls, bushes
    and garden trees beyond them; noise barriers, guard rails and field vegetation on open roads."""
    for side in (1, -1):
        edge, walk = road.edge(side), road.sidewalk(side)
        for s0, s1 in spans(road, S_NEAR, 110.0, gap=1.5):
            # furniture on the sidewalk, 0.5 m from the curb
            q_furn = edge + side * 0.5
            s = s0 + rng.uniform(0, 10)
            while s < s1 and walk > 1.0:
                kind = rng.choice(['tree', 'light', 'sign', 'bollard', 'bin', 'bike', 'bench', 'planter', 'cabinet',
                                   'none'], p=[0.27, 0.13, 0.13, 0.07, 0.06, 0.05, 0.05, 0.05, 0.04, 0.15])
                x, y = road.to_world(s, q_furn)
                if kind == 'tree':
                    tx, ty, r = _tree(prims, rng, road, s, q_furn, scale=rng.uniform(0.7, 1.1))
                    occupancy.take(tx, ty, 2 * r + 0.4, 2 * r + 0.4, road.yaw)
                elif kind == 'light':
                    _street_light(prims, rng, road, side, s, q_furn)
                    occupancy.take(x, y, 0.5, 0.5, road.yaw)
                elif kind == 'sign':
                    _sign(prims, rng, road, side, s, q_furn)
                    occupancy.take(x, y, 0.4, 0.9, road.yaw)
                elif kind == 'bollard':
                    for k in range(int(rng.integers(2, 6))):
                        _pole(prims, rng, road, s + 1.5 * k, q_furn, rng.uniform(0.8, 1.1), 0.08, materials.metal(rng))
                    occupancy.take(*road.to_world(s + 3, q_furn), 7.0, 0.4, road.yaw)
                elif kind == 'bin':
                    _furniture_box(prims, rng, road, s, q_furn, [0.6, 0.6, rng.uniform(0.9, 1.3)], materials.metal(rng),
                                   occupancy)
                elif kind == 'bench':
                    _furniture_box(prims, rng, road, s, q_furn + side * 0.5, [rng.uniform(1.5, 2.2), 0.5,
                                                                            rng.uniform(0.45, 0.9)],
                                   materials.wall(rng), occupancy)
                elif kind == 'planter':
                    _furniture_box(prims, rng, road, s, q_furn, [rng.uniform(0.8, 2.5), rng.uniform(0.6, 1.2),
                                                                 rng.uniform(0.4, 0.9)], materials.wall(rng), occupancy)
                    _bush(prims, rng, road, s, q_furn, base=0.6)
                elif kind == 'cabinet':
                    _furniture_box(prims, rng, road, s, q_furn, [rng.uniform(0.5, 1.2), rng.uniform(0.3, 0.6),
                                                                 rng.uniform(1.0, 1.6)], materials.metal(rng),
                                   occupancy)
                elif kind == 'bike':  # parked bicycles: not cyclists
                    for k in range(int(rng.integers(1, 4))):
                        bx, by = road.to_world(s + 0.7 * k, q_furn + side * 0.3)
                        bz = float(road.ground(s + 0.7 * k, q_furn))
                        yaw = road.yaw + side * np.pi / 2 + rng.normal(0, 0.2)
                        rot = rotation(yaw)
                        add_bicycle(prims, rng, lambda p, o=np.array([bx, by, bz]), r=rot: np.asarray(p) @ r.T + o,
                                    yaw, -1)
                    occupancy.take(*road.to_world(s + 0.7, q_furn + side * 0.3), 2.5, 1.2, road.yaw)
                s += rng.uniform(6, 18)
            _border(prims, rng, road, side, s0, s1, occupancy)


def _border(prims, rng, road, side, s0, s1, occupancy):
    """What separates the sidewalk from the land beyond it, by street type (in KITTI's towns, walls, fences and hedges
    often stand 1.5-2 m beside the parked cars: :func:`~.statistics.clutter_behind_cars`)."""
    outer = road.edge(side) + side * road.sidewalk(side)
    kind = road.kind
    choices = {'urban': (['none', 'hedge', 'wall', 'fence'], [0.4, 0.2, 0.2, 0.2]),
               'narrow': (['none', 'wall', 'fence'], [0.6, 0.25, 0.15]),
               'residential': (['hedge', 'fence', 'wall', 'none'], [0.35, 0.3, 0.2, 0.15]),
               'road': (['vegetation', 'barrier', 'rail', 'fence', 'none'], [0.4, 0.15, 0.15, 0.1, 0.2])}[kind]
    s = s0
    while s < s1:
        length = min(rng.uniform(5, 40), s1 - s)
        what = rng.choice(choices[0], p=choices[1])
        q = outer + side * rng.uniform(0.1, 1.0)
        s_c = s + 0.5 * length
        x, y = road.to_world(s_c, q)
        z0 = float(road.ground(s_c, q))
        if what == 'hedge':
            _hedge(prims, rng, road, s, q + side * 0.5, length)
        elif what == 'wall':
            h = rng.uniform(0.4, 2.2)
            prims.add_box([x, y, z0 + 0.5 * h], [length, rng.uniform(0.2, 0.4), h], road.yaw, materials.wall(rng))
        elif what == 'fence':
            h = rng.uniform(0.9, 2.0)
            prims.add_box([x, y, z0 + 0.5 * h], [length, 0.05, h], road.yaw, materials.fence(rng))
        elif what == 'barrier':
            h = rng.uniform(2.0, 4.0)
            prims.add_box([x, y, z0 + 0.5 * h], [length, 0.3, h], road.yaw, materials.wall(rng))
        elif what == 'rail':  # guard rail: a metal band on posts
            prims.add_box([x, y, z0 + 0.6], [length, 0.1, 0.35], road.yaw, materials.metal(rng))
        elif what == 'vegetation':
            for _ in range(int(length / rng.uniform(2, 6)) + 1):
                ss, qq = s + rng.uniform(0, length), q + side * rng.uniform(0, 8)
                if rng.random() < 0.4:
                    _tree(prims, rng, road, ss, qq)
                else:
                    _bush(prims, rng, road, ss, qq)
        if kind in ('road', 'residential') and rng.random() < 0.4:  # weeds and tall grass on the verge
            _grass(prims, rng, road, s + 0.5 * length, outer + side * rng.uniform(1, 6), length,
                   rng.uniform(1.5, 6))
        if kind == 'residential' and rng.random() < 0.5:  # garden trees and bushes behind the border
            for _ in range(int(rng.integers(1, 4))):
                ss, qq = s + rng.uniform(0, length), outer + side * rng.uniform(1.5, 6)
                (_tree if rng.random() < 0.5 else _bush)(prims, rng, road, ss, qq)
        s += length + (rng.uniform(1, 6) if rng.random() < 0.3 else 0.0)


def add_backdrop(prims, rng, road):
    """Tree lines far beside the road and where it leaves the view: the horizon of a real scan is rarely sky."""
    for side in (1, -1):
        if rng.random() < 0.6:
            q0 = road.edge(side) + side * rng.uniform(18, 40)
            s = rng.uniform(-5, 15)
            while s < 100:
                _tree(prims, rng, road, s, q0 + side * rng.uniform(0, 6), scale=rng.uniform(1.0, 1.5))
                s += rng.uniform(3, 9)
    if rng.random() < 0.5:  # the road bends away: trees across the view's far end, beside the carriageway
        s0 = rng.uniform(65, 95)
        for side in (1, -1):
            q = road.edge(side) + side * rng.uniform(1, 4)
            while abs(q) < 45:
                _tree(prims, rng, road, s0 + rng.uniform(-3, 3), q, scale=rng.uniform(1.0, 1.5))
                q += side * rng.uniform(3, 8)


def add_hills(prims, rng, road):
    """Rising land far beside the road in some frames (KITTI drives past embankments and hillsides)."""
    for side in (1, -1):
        if rng.random() < 0.25:
            slope = rng.uniform(0.1, 0.35)
            start = road.edge(side) + side * rng.uniform(12, 35)
            width = 40.0
            q_mid = start + side * 0.5 * width
            slab(prims, road, S_NEAR, S_FAR, q_mid - 0.5 * width, q_mid + 0.5 * width, road.curb + 0.5 * width * slope,
                 materials.terrain(rng), TERRAIN, roll=np.arctan(slope) * side)
            for _ in range(int(rng.integers(3, 12))):
                ss, qq = rng.uniform(5, 90), start + side * rng.uniform(1, 25)
                (_tree if rng.random() < 0.5 else _bush)(prims, rng, road, ss, qq, base=_hill_height(road, start,
                                                                                                     slope, side, qq))


def _hill_height(road, start, slope, side, q):
    return max(0.0, (q - start) * side) * slope


def build_static_world(prims, rng, road):
    """Ground, buildings and roadside of one frame; returns the :class:`~.streetscape.Occupancy` of what stands on
    the sidewalks."""
    occupancy = Occupancy()
    add_ground(prims, rng, road)
    add_buildings(prims, rng, road)
    add_roadside(prims, rng, road, occupancy)
    add_backdrop(prims, rng, road)
    add_hills(prims, rng, road)
    return occupancy


__all__ = ['build_static_world', 'add_roadside', 'add_backdrop', 'add_hills']
