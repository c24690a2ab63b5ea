"""Road users with real shapes, built from convex primitives (:mod:`.geometry`).

Each ``add_*`` function draws one object's proportions from ``rng``, adds its parts to a
:class:`~.geometry.PrimitiveSet` under one ``owner`` id and returns its label: ``dict(name, box)`` with the
KITTI type name and the bottom-centre lidar box ``[x, y, z, l, w, h, yaw]`` that encloses the body the way
KITTI's annotators draw it (the body's extents; mirrors and a cyclist's arms stay inside).

* car: a lower body with a sloped bonnet, ends that lean back above the bumper, rounded corners in plan view, a
  glass cabin (windscreen, side and rear windows that mostly drop or see the interior) under a solid roof, four
  wheels under the body, bright number plates; sedans, hatchbacks and SUVs;
* van, truck (cab + box), tram, trailer / container ('Misc'): distractors that are not cars;
* pedestrian: articulated legs and arms at a walking phase, torso, head;
* cyclist: a bicycle (spoked wheels that rays mostly pass, frame, bars) and a pedalling rider leaning forward;
  :func:`add_bicycle` alone is a parked bike (not a cyclist).
"""
import numpy as np

from . import materials
from .geometry import FACADE, Material, prism_planes, rotation


def _world(x, y, z0, yaw):
    """A function mapping body-frame points (..., 3) to world coordinates."""
    rot = rotation(yaw)
    origin = np.array([x, y, z0], dtype=np.float64)
    return lambda p: np.asarray(p, dtype=np.float64) @ rot.T + origin


def _chamfer(n1, n2, corner, cut, rot, to_world):
    """World half-space cutting the edge between body-frame faces ``n1``, ``n2`` at body point ``corner``,
    ``cut`` metres in from the corner along the bisector."""
    n = (np.asarray(n1, float) + np.asarray(n2, float))
    n /= np.linalg.norm(n)
    nw = rot @ n
    return np.concatenate([nw, [nw @ to_world(corner) - cut]])


def _plane_through(normal_body, point_body, rot, to_world):
    nw = rot @ (np.asarray(normal_body, float) / np.linalg.norm(normal_body))
    return np.concatenate([nw, [nw @ to_world(point_body)]])


def _bounds(to_world, lo, hi):
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    w = to_world(corners)
    return np.concatenate([w.min(0), w.max(0)])


def _box(prims, to_world, yaw, center, size, material, owner, pitch=0.0, roll=0.0, facade=None):
    """Add a body-frame box (centre, size, pitch/roll about the body axes) in world coordinates."""
    return prims.add_box(to_world(center), size, yaw, material, owner, pitch=pitch, roll=roll, facade=facade)


def _rounded_end(sx, hl, hw, apex, lean, bow, radius, rot, to_world):
    """Half-spaces of a car end at body x = ``sx * hl``: its face leans back by ``lean`` m per m above the height
    ``apex`` (the bumper's most forward line) and recedes below it at 45 deg. In plan view it bows back by ``bow`` m
    at 80 % of the half width ``hw`` (a wide arc, tangent at its middle and at 55 %) and rounds into the sides with
    corners of ``radius`` m (tangent at 40, 62 and 80 deg), so an end seen head-on lies deeper towards its corners
    while a side seen at a slant still runs close to the end."""
    arc = (0.8 * hw) ** 2 / (2 * bow)  # radius of the wide arc

    def recess(y):  # how far the arc lies behind the apex at |y|
        return arc - np.sqrt(arc ** 2 - y ** 2)

    corner = np.array([hl - recess(hw - radius) - radius, hw - radius])  # the corner circle's centre
    tangents = [(0.0, hl, 0.0), (np.arcsin(0.55 * hw / arc), hl - recess(0.55 * hw), 0.55 * hw)]
    for theta in np.radians([40.0, 62.0, 80.0]):
        tangents.append((theta, *(corner + radius * np.array([np.cos(theta), np.sin(theta)]))))
    planes = [_plane_through([sx, 0.0, -1.0], [sx * hl, 0, apex], rot, to_world)]
    for theta, x, y in tangents:
        c, s = np.cos(theta), np.sin(theta)
        for sy in ((1,) if theta == 0 else (1, -1)):
            planes.append(_plane_through([sx * c, sy * s, lean * c], [sx * x, sy * y, apex], rot, to_world))
    return planes


def add_car(prims, rng, x, y, z0, yaw, owner, style=None):
    """A passenger car; ``style`` in ('sedan', 'hatchback', 'suv') or drawn (0.5 / 0.3 / 0.2)."""
    style = style or rng.choice(['sedan', 'hatchback', 'suv'], p=[0.5, 0.3, 0.2])
    length = float(np.clip(rng.normal({'sedan': 3.85, 'hatchback': 3.45, 'suv': 4.15}[style], 0.3), 2.9, 5.2))
    width = float(np.clip(rng.normal(1.56 if style != 'suv' else 1.68, 0.07), 1.4, 1.9))
    height = float(np.clip(rng.normal({'sedan': 1.45, 'hatchback': 1.5, 'suv': 1.7}[style], 0.06), 1.3, 1.95))
    clearance = rng.uniform(0.13, 0.2) + (0.08 if style == 'suv' else 0.0)
    belt = height * rng.uniform(0.58, 0.66)
    paint = materials.paint(rng)
    rot = rotation(yaw)
    to_world = _world(x, y, z0, yaw)
    hl, hw = 0.5 * length, 0.5 * width
    # lower body: a box whose ends lean back above the bumper, bow slightly and have small rounded corners in plan
    # view, with a sloped bonnet front and a rounded tail top. Seen end-on, a real car's returns lie 0.05-0.2 m
    # behind its box's near face, deeper with height (statistics.car_near_face_depths): an upright end would teach a
    # detector to put real cars' boxes too far from the sensor. The corners stay small because a real car's side seen
    # from behind runs close to the far end of its box (statistics.car_far_end_gaps).
    ex, ey, ez = np.eye(3)
    sides = [_plane_through(ey, [0, hw, 0], rot, to_world), _plane_through(-ey, [0, -hw, 0], rot, to_world),
             _plane_through(ez, [0, 0, belt], rot, to_world), _plane_through(-ez, [0, 0, clearance], rot, to_world)]
    plate_z, plate_x = clearance + 0.25, {}
    for sx, lean, apex, bow, cut in ((1, rng.uniform(0.25, 0.45), clearance + rng.uniform(0.03, 0.12),
                                      rng.uniform(0.02, 0.06), (2.2, 0.12, 0.2)),
                                     (-1, rng.uniform(0.12, 0.3), clearance + rng.uniform(0.1, 0.2),
                                      rng.uniform(0.01, 0.04), (1.5, 0.08, 0.15))):
        # each end is its own half of the body (a polyhedron holds at most MAX_PLANES half-spaces)
        half = sides + [_plane_through(-sx * ex, [0, 0, 0], rot, to_world),
                        _chamfer(sx * ex, ez * cut[0], [sx * hl, 0, belt], rng.uniform(*cut[1:]), rot, to_world)]
        half += _rounded_end(sx, hl, hw, apex, lean, bow, rng.uniform(0.05, 0.15), rot, to_world)
        lo, hi = ([0, -hw, clearance], [hl, hw, belt]) if sx > 0 else ([-hl, -hw, clearance], [0, hw, belt])
        prims.add_polyhedron(half, _bounds(to_world, lo, hi), paint, owner)
        plate_x[sx] = hl - lean * max(plate_z - apex, 0.0)  # where the end face is at the plate's height
    # cabin: windscreen, side windows with tumblehome, rear window (hatchbacks / SUVs: nearly upright)
    rise = height - belt
    base_front = hl - length * rng.uniform(0.27, 0.34)
    top_front = base_front - rise * rng.uniform(1.3, 1.8)
    if style == 'sedan':
        base_rear = -hl + length * rng.uniform(0.16, 0.22)
        top_rear = base_rear + rise * rng.uniform(0.9, 1.4)
    else:
        base_rear = -hl + rng.uniform(0.05, 0.15)
        top_rear = base_rear + rise * rng.uniform(0.2, 0.45)
    side_low, side_high = hw - 0.04, hw - rng.uniform(0.18, 0.3)

    def sloped(p_low, p_high, sign):  # plane through two body-frame (x, z) points, facing +-x
        dx, dz = p_high[0] - p_low[0], p_high[1] - p_low[1]
        n = np.array([dz, 0.0, -dx]) * sign
        return _plane_through(n, [p_low[0], 0, p_low[1]], rot, to_world)

    def side(sign):
        n = np.array([0.0, rise, side_low - side_high]) * np.array([1, sign, 1])
        return _plane_through(n, [0, sign * side_low, belt], rot, to_world)

    cabin = [sloped((base_front, belt), (top_front, height), 1), sloped((base_rear, belt), (top_rear, height), -1),
             side(1), side(-1), _plane_through(ez, [0, 0, height - 0.03], rot, to_world),
             _plane_through(-ez, [0, 0, belt - 0.05], rot, to_world)]
    prims.add_polyhedron(cabin, _bounds(to_world, [base_rear, -side_low, belt - 0.05], [base_front, side_low, height]),
                         materials.car_glass(rng), owner)
    roof_len = top_front - top_rear
    _box(prims, to_world, yaw, [0.5 * (top_front + top_rear), 0, height - 0.02], [roof_len, 2 * side_high, 0.04],
         paint, owner)
    # wheels: octagonal prisms across the body, below and inside the wheel arches
    radius = rng.uniform(0.29, 0.34) + (0.03 if style == 'suv' else 0.0)
    axle_front, axle_rear = hl - rng.uniform(0.75, 0.95), -hl + rng.uniform(0.7, 1.0)
    tyre = materials.tyre(rng)
    for ax in (axle_front, axle_rear):
        for sy in (1, -1):
            c = to_world([ax, sy * (hw - 0.13), radius])
            prims.add_polyhedron(prism_planes(c, radius, 0.2, yaw, axis='y'),
                                 np.concatenate([c - radius, c + radius]), tyre, owner)
    plate = materials.retro(rng)
    for sx in (1, -1):
        _box(prims, to_world, yaw, [sx * (plate_x[sx] + 0.005), 0, plate_z], [0.02, 0.5, 0.12], plate, owner)
    # door mirrors at the foot of the windscreen stand outside the box, as on KITTI's labels
    reach = rng.uniform(0.08, 0.18)
    for sy in (1, -1):
        _box(prims, to_world, yaw, [base_front - 0.08, sy * (hw + 0.5 * reach), belt + 0.08], [0.1, reach, 0.13],
             paint, owner)
    # KITTI's boxes enclose the body with a little slack (number plates, bumpers) and leave the mirrors out
    return dict(name='Car', box=np.array([x, y, z0, length + 0.06, width + 0.04, height + 0.02, yaw]))


def add_van(prims, rng, x, y, z0, yaw, owner):
    """A van (KITTI 'Van'): a tall box body, short sloped bonnet, glass windscreen band."""
    length, width, height = rng.uniform(4.5, 5.8), rng.uniform(1.85, 2.05), rng.uniform(1.9, 2.6)
    clearance = rng.uniform(0.18, 0.28)
    paint = materials.paint(rng)
    rot = rotation(yaw)
    to_world = _world(x, y, z0, yaw)
    hl, hw = 0.5 * length, 0.5 * width
    ex, ey, ez = np.eye(3)
    planes = [_plane_through(v, p, rot, to_world) for v, p in
              ((ex, [hl, 0, 0]), (-ex, [-hl, 0, 0]), (ey, [0, hw, 0]), (-ey, [0, -hw, 0]), (ez, [0, 0, height]),
               (-ez, [0, 0, clearance]))]
    planes.append(_chamfer(ex, ez * 0.8, [hl, 0, height], rng.uniform(0.5, 0.8), rot, to_world))
    planes.append(_chamfer(ex, ez * 3.0, [hl, 0, 0.55 * height], 0.15, rot, to_world))
    for sx in (1, -1):
        for sy in (1, -1):
            planes.append(_chamfer(ex * sx, ey * sy, [sx * hl, sy * hw, 0], 0.15, rot, to_world))
    prims.add_polyhedron(planes, _bounds(to_world, [-hl, -hw, clearance], [hl, hw, height]), paint, owner)
    _wheels(prims, rng, to_world, yaw, hl - 0.9, -hl + 1.0, hw, rng.uniform(0.3, 0.36), owner)
    return dict(name='Van', box=np.array([x, y, z0, length, width, height, yaw]))


def _wheels(prims, rng, to_world, yaw, axle_front, axle_rear, half_width, radius, owner, width=0.25):
    tyre = materials.tyre(rng)
    for ax in (axle_front, axle_rear):
        for sy in (1, -1):
            c = to_world([ax, sy * (half_width - 0.15), radius])
            prims.add_polyhedron(prism_planes(c, radius, width, yaw, axis='y'),
                                 np.concatenate([c - radius, c + radius]), tyre, owner)


def add_truck(prims, rng, x, y, z0, yaw, owner):
    """A lorry (KITTI 'Truck'): cab with a glass windscreen in front of a cargo box."""
    cargo_len, width = rng.uniform(4.5, 9.0), rng.uniform(2.35, 2.55)
    cab_len, cab_h, cargo_h = rng.uniform(1.8, 2.4), rng.uniform(2.6, 3.1), rng.uniform(2.9, 3.8)
    length = cab_len + 0.3 + cargo_len
    to_world = _world(x, y, z0, yaw)
    hl = 0.5 * length
    paint = materials.paint(rng)
    cab_x = hl - 0.5 * cab_len
    _box(prims, to_world, yaw, [cab_x, 0, 0.5 * (0.6 + cab_h - 0.9)], [cab_len, width - 0.05, cab_h - 1.5], paint,
         owner)
    _box(prims, to_world, yaw, [cab_x + 0.1, 0, cab_h - 0.45], [cab_len - 0.3, width - 0.15, 0.9],
         materials.car_glass(rng), owner)
    _box(prims, to_world, yaw, [-hl + 0.5 * cargo_len, 0, 0.5 * (cargo_h + 1.0)], [cargo_len, width, cargo_h - 1.0],
         materials.wall(rng), owner)
    _wheels(prims, rng, to_world, yaw, hl - 1.2, -hl + 1.5, 0.5 * width, 0.5, owner, width=0.35)
    return dict(name='Truck', box=np.array([x, y, z0, length, width, max(cab_h, cargo_h), yaw]))


def add_tram(prims, rng, x, y, z0, yaw, owner):
    """A tram (KITTI 'Tram'): a long car body with a band of windows."""
    length, width, height = rng.uniform(14.0, 30.0), 2.65, rng.uniform(3.3, 3.7)
    to_world = _world(x, y, z0, yaw)
    body = Material(rng.uniform(0.2, 0.5), FACADE, a=0.35, gloss=1.0)  # a band of windows
    _box(prims, to_world, yaw, [0, 0, 0.25 + 0.5 * (height - 0.25)], [length, width, height - 0.25], body, owner,
         facade=(to_world([-0.5 * length, 0, 0]), yaw, 1.8, 2.4))
    return dict(name='Tram', box=np.array([x, y, z0, length, width, height, yaw]))


def add_misc(prims, rng, x, y, z0, yaw, owner):
    """A trailer, container or cart (KITTI 'Misc')."""
    length, width, height = rng.uniform(1.5, 4.5), rng.uniform(1.2, 2.3), rng.uniform(0.8, 2.6)
    to_world = _world(x, y, z0, yaw)
    lift = rng.uniform(0.0, 0.4)
    _box(prims, to_world, yaw, [0, 0, lift + 0.5 * (height - lift)], [length, width, height - lift],
         materials.wall(rng), owner)
    return dict(name='Misc', box=np.array([x, y, z0, length, width, height, yaw]))


def add_pedestrian(prims, rng, x, y, z0, yaw, owner, walking=None):
    """A person at a random walking phase (standing when ``walking`` is False)."""
    stature = float(np.clip(rng.normal(1.74, 0.08), 1.5, 1.98))
    walking = rng.random() < 0.75 if walking is None else walking
    phase = rng.uniform(0, 2 * np.pi)
    swing = (rng.uniform(0.25, 0.45) if walking else rng.uniform(0.0, 0.06)) * np.sin(phase)
    to_world = _world(x, y, z0, yaw)
    hip, leg = 0.53 * stature, 0.52 * stature
    shoulder = 0.82 * stature
    clothes_top, clothes_leg = materials.clothes(rng), materials.clothes(rng)
    lean = rng.uniform(0.0, 0.08)
    for side, angle in ((1, swing), (-1, -swing)):  # legs swing about the hip (pitch about the body y axis)
        centre = np.array([np.sin(angle) * 0.5 * leg, side * 0.1, hip - np.cos(angle) * 0.5 * leg])
        _box(prims, to_world, yaw, centre, [0.15, 0.14, leg], clothes_leg, owner, pitch=-angle)
    torso_h = shoulder - hip + 0.04
    _box(prims, to_world, yaw, [0.02, 0, hip + 0.5 * torso_h], [0.24, rng.uniform(0.34, 0.42), torso_h], clothes_top,
         owner, pitch=lean)
    arm = 0.34 * stature
    for side, angle in ((1, -0.8 * swing), (-1, 0.8 * swing)):
        centre = np.array([np.sin(angle) * 0.5 * arm, side * 0.23, shoulder - np.cos(angle) * 0.5 * arm])
        _box(prims, to_world, yaw, centre, [0.09, 0.08, arm], clothes_top, owner, pitch=-angle)
    head = to_world([0.03, 0, stature - 0.115])
    prims.add_ellipsoid(head, [0.1, 0.085, 0.115], yaw, materials.skin(rng), owner)
    stride = abs(np.sin(swing)) * leg
    length = max(0.55, 2 * stride + 0.35)
    return dict(name='Pedestrian', box=np.array([x, y, z0, length, rng.uniform(0.58, 0.75), stature, yaw]))


def add_bicycle(prims, rng, to_world, yaw, owner, upright=True):
    """A bicycle in a body frame whose origin is between its wheels on the ground; returns its wheelbase."""
    radius, base = rng.uniform(0.32, 0.36), rng.uniform(1.0, 1.1)
    frame = materials.metal(rng)
    for ax in (0.5 * base, -0.5 * base):  # spoked wheels: tyres return, most rays pass between the spokes
        c = to_world([ax, 0, radius])
        prims.add_polyhedron(prism_planes(c, radius, 0.05, yaw, axis='y'), np.concatenate([c - radius, c + radius]),
                             materials.spokes(rng), owner)
    _box(prims, to_world, yaw, [0.05, 0, radius + 0.32], [0.62, 0.04, 0.04], frame, owner, pitch=0.1)   # top tube
    _box(prims, to_world, yaw, [0.05, 0, radius + 0.12], [0.6, 0.04, 0.05], frame, owner, pitch=-0.6)   # down tube
    _box(prims, to_world, yaw, [-0.2, 0, radius + 0.3], [0.04, 0.04, 0.55], frame, owner, pitch=-0.3)   # seat tube
    _box(prims, to_world, yaw, [0.4, 0, radius + 0.55], [0.05, 0.55, 0.04], frame, owner)               # bars
    return base


def add_cyclist(prims, rng, x, y, z0, yaw, owner):
    """A rider on a bicycle (KITTI 'Cyclist')."""
    to_world = _world(x, y, z0, yaw)
    base = add_bicycle(prims, rng, to_world, yaw, owner)
    stature = float(np.clip(rng.normal(1.75, 0.08), 1.55, 1.95))
    clothes = materials.clothes(rng)
    seat = 0.95
    crank = rng.uniform(0, 2 * np.pi)
    for side, angle in ((1, crank), (-1, crank + np.pi)):  # legs from the saddle to the pedals
        foot = np.array([0.05 + 0.17 * np.cos(angle), side * 0.12, 0.3 + 0.17 * np.sin(angle)])
        hip = np.array([-0.2, side * 0.1, seat])
        mid = 0.5 * (hip + foot)
        vec = hip - foot
        pitch = np.arctan2(vec[0], vec[2])
        _box(prims, to_world, yaw, mid, [0.14, 0.13, np.linalg.norm(vec) + 0.1], clothes, owner, pitch=pitch)
    lean = rng.uniform(0.5, 0.9)
    torso = 0.3 * stature + 0.05
    centre = np.array([-0.2 + np.sin(lean) * 0.5 * torso, 0, seat + np.cos(lean) * 0.5 * torso])
    _box(prims, to_world, yaw, centre, [0.24, 0.38, torso], clothes, owner, pitch=lean)
    shoulder = np.array([-0.2 + np.sin(lean) * torso, 0, seat + np.cos(lean) * torso])
    head = to_world(shoulder + np.array([0.08, 0, 0.17]))
    prims.add_ellipsoid(head, [0.11, 0.09, 0.12], yaw, materials.clothes(rng), owner)  # helmet or head
    for side in (1, -1):
        hand = np.array([0.4, side * 0.25, 0.9])
        start = shoulder + np.array([0, side * 0.2, 0])
        vec = hand - start
        pitch = np.arctan2(vec[0], vec[2])
        _box(prims, to_world, yaw, 0.5 * (hand + start), [0.08, 0.08, np.linalg.norm(vec)], clothes, owner,
             pitch=pitch)
    top = float(shoulder[2] + 0.29)
    return dict(name='Cyclist', box=np.array([x, y, z0, max(base + 2 * 0.34, 1.6), rng.uniform(0.55, 0.7),
                                              max(top, 1.55), yaw]))


BUILDERS = dict(Car=add_car, Van=add_van, Truck=add_truck, Tram=add_tram, Misc=add_misc, Pedestrian=add_pedestrian,
                Cyclist=add_cyclist)

__all__ = ['add_car', 'add_van', 'add_truck', 'add_tram', 'add_misc', 'add_pedestrian', 'add_cyclist', 'add_bicycle',
           'BUILDERS']
