"""Ray casting against convex polyhedra and ellipsoids, vectorised over (primitive, ray) pairs (numpy).

Every solid of the simulated world is a convex polyhedron (an intersection of half-spaces ``n . x <= d``:
boxes, slabs, chamfered car bodies, tilted limbs, octagonal wheels and poles) or an ellipsoid (heads, tree
crowns, bushes). Rays start at the origin. For each primitive only the rays inside its angular window
(azimuth and elevation spans of its bounding box, seen from the origin) are tested, so a frame costs the
sum of the primitives' windows, not rays x primitives.

Materials decide what a hit returns (:data:`KINDS`):

* ``solid``: the surface;
* ``glass``: the ray passes through with probability ``a`` (on to what lies behind: the far window, a hedge or a
  wall behind the car, or nothing), else with probability ``b`` the interior behind it (``0.3-1.2 m`` deeper,
  never past the far side), else the glass surface;
* ``volume``: porous matter (foliage): the ray travels an exponential depth of mean ``a`` metres inside; if
  that passes the far side, the ray goes on to what lies behind;
* ``mesh``: fences, spokes: the ray passes through with probability ``a``;
* ``facade``: a wall whose windows (a grid in the wall's own (along, up) coordinates; ``a`` = window share
  of each 3 m bay) drop the return with probability 0.6, else return from the room behind (0.5-4 m deeper).
"""
from typing import NamedTuple

import numpy as np

KINDS = ('solid', 'glass', 'volume', 'mesh', 'facade')
SOLID, GLASS, VOLUME, MESH, FACADE = range(len(KINDS))
MAX_PLANES = 16


def box_planes(center, size, yaw=0.0, pitch=0.0, roll=0.0):
    """(6, 4) half-spaces ``[nx, ny, nz, d]`` (``n . x <= d`` inside) of a box.

    Args:
        center (sequence): (3,) the box's centre (not its bottom).
        size (sequence): (3,) extents along its own x, y, z axes.
        yaw, pitch, roll (float): rotations (radians) about z, then the rotated y, then the rotated x.
    """
    rot = rotation(yaw, pitch, roll)
    normals = np.concatenate([rot.T, -rot.T])  # rows: the box axes in world coordinates, then their opposites
    half = 0.5 * np.asarray(size, dtype=np.float64)
    d = normals @ np.asarray(center, dtype=np.float64) + np.concatenate([half, half])
    return np.concatenate([normals, d[:, None]], axis=1)


def rotation(yaw=0.0, pitch=0.0, roll=0.0):
    """(3, 3) matrix whose columns are a body's x, y, z axes in world coordinates (z-y-x rotation order)."""
    cy, sy, cp, sp, cr, sr = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll)
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    return rz @ ry @ rx


def prism_planes(center, radius, length, axis_yaw=0.0, axis='z', sides=8):
    """(sides + 2, 4) half-spaces of a regular prism (an octagonal pole or wheel, a cylinder stand-in).

    Args:
        center (sequence): (3,) centre; radius (float): inscribed radius; length (float): extent along the axis.
        axis (str): 'z' (upright: poles, trunks) or 'y' (horizontal across a heading ``axis_yaw``: wheels).
    """
    angles = np.arange(sides) * (2 * np.pi / sides)
    ring = np.stack([np.cos(angles), np.sin(angles), np.zeros(sides)], axis=1)  # around the z axis
    cap = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
    normals = np.concatenate([ring, cap])
    if axis == 'y':  # turn the prism's axis from z onto the body's y axis, then by the heading
        normals = normals[:, [0, 2, 1]]
    rot = rotation(axis_yaw)
    normals = normals @ rot.T
    offsets = np.concatenate([np.full(sides, radius), np.full(2, 0.5 * length)])
    d = normals @ np.asarray(center, dtype=np.float64) + offsets
    return np.concatenate([normals, d[:, None]], axis=1)


class Material(NamedTuple):
    """How a surface returns light.

    Attributes:
        reflectivity (float): diffuse reflectance in [0, 1] (the sensor's reading at normal incidence).
        kind (int): behaviour, an index into :data:`KINDS`; ``a``, ``b``: its parameters (module docstring).
        gloss (float): the reading falls as ``cos(incidence) ** gloss``: ~0.15 for matte ground and foliage (KITTI's
            road reads about the same at every range), ~2 for glossy car paint (dark where seen at a glancing angle).
    """
    reflectivity: float
    kind: int = 0
    a: float = 0.0
    b: float = 0.0
    gloss: float = 0.15


FIELDS = ('kind', 'a', 'b', 'reflectivity', 'gloss', 'owner', 'tag')


class PrimitiveSet:
    """A growing list of polyhedra and ellipsoids with their materials and owners.

    Every primitive carries a :class:`Material`, an ``owner`` (object id; -1 for the static world), a surface
    ``tag`` for the renderer and axis-aligned ``bounds`` (6,). A facade also carries its pattern frame (an
    origin on the wall, the along-wall direction's yaw, the window bay width and floor height).
    """

    def __init__(self):
        self.planes = []
        self.ellipsoids = []  # (centre (3), radii (3), yaw)
        self.fields = {'poly': {f: [] for f in FIELDS + ('bounds',)}, 'ell': {f: [] for f in FIELDS + ('bounds',)}}
        self.facade = {}

    def _record(self, group, material, owner, tag, bounds):
        values = dict(kind=material.kind, a=material.a, b=material.b, reflectivity=material.reflectivity,
                      gloss=material.gloss, owner=owner, tag=tag, bounds=np.asarray(bounds, dtype=np.float64))
        for name, value in values.items():
            self.fields[group][name].append(value)

    def add_polyhedron(self, planes, bounds, material, owner=-1, tag=0, facade=None):
        """Add a convex polyhedron; returns its index among the polyhedra.

        Args:
            planes (array): (K, 4) half-spaces ``n . x <= d`` (K <= :data:`MAX_PLANES`; normals need not be unit).
            bounds (array): (6,) axis-aligned bounds enclosing it.
            material (Material); owner (int); tag (int): the surface's kind for the renderer (0 = other).
            facade (tuple): for ``FACADE`` materials: (origin (3,), along-wall yaw, bay width, floor height).
        """
        planes = np.asarray(planes, dtype=np.float64).reshape(-1, 4)
        if not 1 <= len(planes) <= MAX_PLANES:
            raise ValueError(f'add_polyhedron: planes must be (K, 4) with 1 <= K <= {MAX_PLANES}, got {planes.shape}')
        norm = np.linalg.norm(planes[:, :3], axis=1, keepdims=True)
        if (norm == 0).any():
            raise ValueError('add_polyhedron: a plane has a zero normal')
        index = len(self.planes)
        self.planes.append(planes / norm)
        self._record('poly', material, owner, tag, bounds)
        if material.kind == FACADE:
            if facade is None:
                raise ValueError('add_polyhedron: a FACADE material needs its facade=(origin, yaw, bay, floor)')
            self.facade[index] = facade
        return index

    def add_box(self, center, size, yaw, material, owner=-1, tag=0, pitch=0.0, roll=0.0, facade=None):
        """Add a box (see :func:`box_planes`); its bounds come from its eight corners."""
        rot = rotation(yaw, pitch, roll)
        signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)
        corners = (signs * (0.5 * np.asarray(size, dtype=np.float64))) @ rot.T + np.asarray(center, dtype=np.float64)
        bounds = np.concatenate([corners.min(0), corners.max(0)])
        return self.add_polyhedron(box_planes(center, size, yaw, pitch, roll), bounds, material, owner, tag, facade)

    def add_ellipsoid(self, center, radii, yaw, material, owner=-1, tag=0):
        """Add an ellipsoid with semi-axes ``radii`` (along its own x, y, z) turned by ``yaw``."""
        center = np.asarray(center, dtype=np.float64)
        radii = np.asarray(radii, dtype=np.float64)
        if (radii <= 0).any():
            raise ValueError(f'add_ellipsoid: radii must be positive, got {radii}')
        r = radii.max()
        self.ellipsoids.append((center, radii, float(yaw)))
        self._record('ell', material, owner, tag, np.concatenate([center - r, center + r]))

    def __len__(self):
        return len(self.planes) + len(self.ellipsoids)

    def arrays(self):
        """Stacked arrays: polyhedra first, then ellipsoids (the primitive index order of :func:`cast`)."""
        poly, ell = self.fields['poly'], self.fields['ell']
        out = {name: np.array(poly[name] + ell[name], dtype=np.int64 if name in ('kind', 'owner', 'tag')
                              else np.float64) for name in FIELDS}
        out['bounds'] = np.array(poly['bounds'] + ell['bounds'], dtype=np.float64).reshape(-1, 6)
        out['num_polyhedra'] = len(self.planes)
        planes = np.zeros((len(self.planes), MAX_PLANES, 4))
        planes[..., 3] = 1.0  # padding: 0 . x <= 1 always holds
        for i, p in enumerate(self.planes):
            planes[i, :len(p)] = p
        out['planes'] = planes
        out['ellipsoids'] = self.ellipsoids
        frame = np.zeros((len(out['kind']), 6))  # facade pattern frames: origin (3), yaw, bay, floor
        frame[:, 4:] = 1.0
        for index, (origin, yaw, bay, floor) in self.facade.items():
            frame[index] = [*origin, yaw, bay, floor]
        out['facade'] = frame
        return out


def angular_windows(bounds, elevation, azimuth):
    """Index ranges of the beams and columns that can hit each axis-aligned box.

    Args:
        bounds (array): (P, 6) ``[xmin, ymin, zmin, xmax, ymax, zmax]``.
        elevation (array): (B,) beam elevations (radians, highest first); azimuth (C,) ascending column azimuths.
    Returns:
        tuple of (P,) int arrays: ``b0, b1`` (beams ``b0 <= b < b1``) and ``c0, c1`` (columns ``c0 <= c < c1``;
        for a full turn of evenly spaced columns they count modulo the number of columns).
    """
    lo, hi = bounds[:, :3], bounds[:, 3:]
    # horizontal distance range over the footprint rectangle
    dx = np.maximum(np.maximum(lo[:, 0], -hi[:, 0]), 0.0)
    dy = np.maximum(np.maximum(lo[:, 1], -hi[:, 1]), 0.0)
    rho_min = np.hypot(dx, dy)
    rho_max = np.hypot(np.maximum(np.abs(lo[:, 0]), np.abs(hi[:, 0])), np.maximum(np.abs(lo[:, 1]), np.abs(hi[:, 1])))
    inside = rho_min <= 1e-6
    safe_min = np.maximum(rho_min, 1e-6)
    el_hi = np.where(hi[:, 2] >= 0, np.arctan2(hi[:, 2], safe_min), np.arctan2(hi[:, 2], rho_max))
    el_lo = np.where(lo[:, 2] <= 0, np.arctan2(lo[:, 2], safe_min), np.arctan2(lo[:, 2], rho_max))
    el_hi = np.where(inside & (hi[:, 2] >= 0), np.pi / 2, el_hi)
    el_lo = np.where(inside & (lo[:, 2] <= 0), -np.pi / 2, el_lo)
    # elevations are sorted descending: beams with el_lo <= el <= el_hi
    neg = -elevation
    b0 = np.searchsorted(neg, -el_hi, side='left')
    b1 = np.searchsorted(neg, -el_lo, side='right')
    # azimuth span from the footprint corners (exact for a convex footprint that excludes the origin)
    cx = np.stack([lo[:, 0], hi[:, 0], hi[:, 0], lo[:, 0]], axis=1)
    cy = np.stack([lo[:, 1], lo[:, 1], hi[:, 1], hi[:, 1]], axis=1)
    centre = np.arctan2(0.5 * (lo[:, 1] + hi[:, 1]), 0.5 * (lo[:, 0] + hi[:, 0]))
    offsets = (np.arctan2(cy, cx) - centre[:, None] + np.pi) % (2 * np.pi) - np.pi
    az_lo = centre + offsets.min(axis=1)
    az_hi = centre + offsets.max(axis=1)
    num_cols = len(azimuth)
    step = (azimuth[-1] - azimuth[0]) / max(num_cols - 1, 1) if num_cols > 1 else 2 * np.pi
    full_circle = num_cols > 1 and (azimuth[-1] - azimuth[0] + 1.5 * step) >= 2 * np.pi
    if full_circle:  # columns are indexed modulo the turn: a span across +-pi keeps one contiguous range
        c0 = np.ceil((az_lo - azimuth[0]) / step - 1e-9).astype(np.int64)
        c1 = np.floor((az_hi - azimuth[0]) / step + 1e-9).astype(np.int64) + 1
        c1 = np.minimum(c1, c0 + num_cols)
    else:
        c0 = np.searchsorted(azimuth, az_lo, side='left')
        c1 = np.searchsorted(azimuth, az_hi, side='right')
    c0 = np.where(inside, 0, c0)
    c1 = np.where(inside, num_cols, c1)
    return b0, np.maximum(b1, b0), c0, np.maximum(c1, c0)


def window_pairs(windows, ray_index):
    """(primitive, ray) pairs of every primitive's window.

    Args:
        windows (tuple): ``b0, b1, c0, c1`` from :func:`angular_windows`.
        ray_index (array): (B, C) int, the cast ray of each (beam, column) cell or -1 for none.
    Returns:
        tuple: ``prim`` (Q,) and ``ray`` (Q,) int arrays (cells without a ray left out).
    """
    b0, b1, c0, c1 = windows
    nb, nc = b1 - b0, c1 - c0
    counts = nb * nc
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    prim = np.repeat(np.arange(len(counts)), counts)
    start = np.cumsum(counts) - counts
    local = np.arange(total) - np.repeat(start, counts)
    width = np.repeat(np.maximum(nc, 1), counts)
    beam = np.repeat(b0, counts) + local // width
    col = (np.repeat(c0, counts) + local % width) % ray_index.shape[1]
    ray = ray_index[beam, col]
    keep = ray >= 0
    return prim[keep], ray[keep]


def _polyhedron_hits(planes, directions):
    """Entry distance, exit distance and entry-plane normal of rays from the origin into polyhedra.

    Args:
        planes (array): (Q, K, 4) half-spaces per pair; directions (Q, 3) unit rays.
    Returns:
        tuple: ``t_in`` (Q,) (inf where missed), ``t_out`` (Q,), ``face`` (Q,) index of the entry plane.
    """
    nd = np.einsum('qkc,qc->qk', planes[..., :3], directions)
    d = planes[..., 3]
    with np.errstate(divide='ignore', invalid='ignore'):
        t = d / nd
    entering = nd < -1e-12
    leaving = nd > 1e-12
    parallel_out = (~entering) & (~leaving) & (d < 0)  # parallel to a plane the origin is outside of
    t_enter = np.where(entering, t, -np.inf)
    t_leave = np.where(leaving, t, np.inf)
    face = t_enter.argmax(axis=1)
    t_in = np.take_along_axis(t_enter, face[:, None], axis=1)[:, 0]
    t_out = t_leave.min(axis=1)
    hit = (t_in <= t_out) & (t_in > 0) & ~parallel_out.any(axis=1)
    return np.where(hit, t_in, np.inf), t_out, face


def _ellipsoid_hits(ellipsoids, prim, directions):
    """Entry/exit distances and surface normals of rays from the origin into ellipsoids (see
    :func:`_polyhedron_hits`); ``prim`` indexes ``ellipsoids``."""
    centers = np.array([e[0] for e in ellipsoids])[prim]
    radii = np.array([e[1] for e in ellipsoids])[prim]
    yaw = np.array([e[2] for e in ellipsoids])[prim]
    c, s = np.cos(yaw), np.sin(yaw)

    def local(v):  # world -> ellipsoid frame (rotate by -yaw), then scale to the unit sphere
        return np.stack([c * v[:, 0] + s * v[:, 1], -s * v[:, 0] + c * v[:, 1], v[:, 2]], axis=1) / radii

    o = local(-centers)
    d = local(directions)
    qa = (d * d).sum(1)
    qb = 2 * (o * d).sum(1)
    qc = (o * o).sum(1) - 1
    disc = qb * qb - 4 * qa * qc
    root = np.sqrt(np.maximum(disc, 0.0))
    t_in = (-qb - root) / (2 * qa)
    t_out = (-qb + root) / (2 * qa)
    hit = (disc >= 0) & (t_in > 0)
    p = o + t_in[:, None] * d
    n_local = p / radii  # gradient of |x / r|^2 in the scaled frame
    normal = np.stack([c * n_local[:, 0] - s * n_local[:, 1], s * n_local[:, 0] + c * n_local[:, 1], n_local[:, 2]], 1)
    normal /= np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-12)
    return np.where(hit, t_in, np.inf), t_out, normal


def cast(primitives, directions, ray_index, elevation, azimuth, rng):
    """Nearest return of every ray, with the materials' behaviour (:data:`KINDS`) applied.

    Args:
        primitives (PrimitiveSet): the world.
        directions (array): (R, 3) unit rays; ray_index (B, C) int grid -> ray (or -1);
        elevation (B,), azimuth (C,) radians of the grid.
        rng (np.random.Generator): draws the materials' random outcomes (deterministic per frame seed).
    Returns:
        dict: ``distance`` (R,) (inf: no return), ``primitive`` (R,) index of the primitive that returned
        (-1: none), ``owner`` (R,) its owner (-1: the static world or no return), ``cos_incidence`` (R,),
        ``reflectivity``, ``gloss`` and ``tag`` (R,) of the returning surface, ``seen_owner`` (R,) owner of the
        nearest surface even where it returned nothing
        (glass, windows), and ``owner_rays`` (O,) per owner id ``0..O-1`` the rays its geometry intercepts
        when nothing else is in the way (for occlusion levels).
    """
    arr = primitives.arrays()
    num_rays = len(directions)
    distance = np.full(num_rays, np.inf)
    winner = np.full(num_rays, -1, dtype=np.int64)
    normal_of_ray = np.zeros((num_rays, 3))
    dropped = np.zeros(num_rays, dtype=bool)
    num_owners = int(arr['owner'].max()) + 1 if len(arr['owner']) else 0
    owner_rays = np.zeros(max(num_owners, 0), dtype=np.int64)
    prim, ray = window_pairs(angular_windows(arr['bounds'], elevation, azimuth), ray_index) if len(arr['kind']) \
        else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    npoly = arr['num_polyhedra']
    t_in = np.full(len(prim), np.inf)
    t_out = np.zeros(len(prim))
    face = np.zeros(len(prim), dtype=np.int64)  # entry plane of a polyhedron; normals are gathered for winners only
    normal = np.zeros((len(prim), 3))           # ellipsoids' normals
    is_poly = prim < npoly
    if is_poly.any():
        sel = np.flatnonzero(is_poly)
        t_in[sel], t_out[sel], face[sel] = _polyhedron_hits(arr['planes'][prim[sel]], directions[ray[sel]])
    if (~is_poly).any():
        sel = np.flatnonzero(~is_poly)
        t_in[sel], t_out[sel], normal[sel] = _ellipsoid_hits(arr['ellipsoids'], prim[sel] - npoly, directions[ray[sel]])
    hit = np.isfinite(t_in)
    prim, ray, t_in, t_out, face, normal = prim[hit], ray[hit], t_in[hit], t_out[hit], face[hit], normal[hit]
    owned = arr['owner'][prim] >= 0
    if owned.any():  # distinct (owner, ray) pairs: an object's parts may cover the same ray twice
        keys = np.unique(arr['owner'][prim[owned]] * np.int64(num_rays) + ray[owned])
        owner_rays += np.bincount(keys // num_rays, minlength=num_owners)[:num_owners]
    t, drop = _material_response(arr, prim, ray, t_in, t_out, directions, rng)
    # nearest response per ray; a dropped response (a facade's window) still hides what lies behind it
    np.minimum.at(distance, ray, t)
    first = np.isfinite(t) & (t == distance[ray])
    winner[ray[first]] = prim[first]
    won_poly = first & (prim < npoly)
    normal[won_poly] = arr['planes'][prim[won_poly], face[won_poly], :3]
    normal_of_ray[ray[first]] = normal[first]
    dropped[ray[first]] = drop[first]
    seen_owner = np.where(winner >= 0, arr['owner'][np.maximum(winner, 0)], -1) if len(arr['owner']) \
        else np.full(num_rays, -1)
    distance[dropped] = np.inf
    winner[dropped] = -1
    returned = winner >= 0
    owner = np.where(returned, seen_owner, -1)
    refl = np.where(returned, arr['reflectivity'][np.maximum(winner, 0)], 0.0) if len(arr['owner']) \
        else np.zeros(num_rays)
    tag = np.where(returned, arr['tag'][np.maximum(winner, 0)], 0) if len(arr['owner']) else np.zeros(num_rays, int)
    gloss = np.where(returned, arr['gloss'][np.maximum(winner, 0)], 0.0) if len(arr['owner']) else np.zeros(num_rays)
    cos_inc = np.abs((normal_of_ray * directions).sum(1))
    return dict(distance=distance, primitive=winner, owner=owner, cos_incidence=cos_inc, reflectivity=refl, tag=tag,
                gloss=gloss, seen_owner=seen_owner, owner_rays=owner_rays)


def _material_response(arr, prim, ray, t_in, t_out, directions, rng):
    """Distance each (primitive, ray) hit reports (inf: passes through) and whether it is dropped."""
    kind = arr['kind'][prim]
    a, b = arr['a'][prim], arr['b'][prim]
    t = t_in.copy()
    drop = np.zeros(len(t), dtype=bool)
    u = rng.random(len(t))
    glass = kind == GLASS
    if glass.any():
        depth = rng.uniform(0.3, 1.2, len(t))
        interior = glass & (u >= a) & (u < a + b)
        t = np.where(interior, np.minimum(t_in + depth, t_out - 0.02), t)
        t = np.where(glass & (u < a), np.inf, t)
    volume = kind == VOLUME
    if volume.any():
        depth = rng.exponential(1.0, len(t)) * np.maximum(a, 1e-3)
        t = np.where(volume, np.where(t_in + depth < t_out, t_in + depth, np.inf), t)
    mesh = kind == MESH
    if mesh.any():
        t = np.where(mesh & (u < a), np.inf, t)
    facade = kind == FACADE
    if facade.any():
        sel = np.flatnonzero(facade)
        window = _in_window(arr['facade'][prim[sel]], t_in[sel, None] * directions[ray[sel]], a[sel])
        deeper = rng.uniform(0.5, 4.0, len(sel))
        drop[sel] |= window & (u[sel] < 0.6)
        t[sel] = np.where(window & (u[sel] >= 0.6), t_in[sel] + deeper, t[sel])
    return t, drop


def _in_window(frames, points, share):
    """(Q,) bool: facade hits that fall on a window of the facade's grid.

    Args:
        frames (array): (Q, 6) pattern frame of each hit's facade: origin (3), along-wall yaw, bay width, floor
            height; points (Q, 3) hit points; share (Q,) window share of a bay.
    """
    rel = points - frames[:, :3]
    along = rel[:, 0] * np.cos(frames[:, 3]) + rel[:, 1] * np.sin(frames[:, 3])
    up = rel[:, 2]
    fu = (along / frames[:, 4]) % 1.0
    fv = (up / frames[:, 5]) % 1.0
    half = 0.5 * np.sqrt(np.clip(share, 0, 1))
    return (np.abs(fu - 0.5) < half) & (np.abs(fv - 0.55) < half) & (up > 0.8)


__all__ = ['KINDS', 'SOLID', 'GLASS', 'VOLUME', 'MESH', 'FACADE', 'Material', 'PrimitiveSet', 'box_planes',
           'prism_planes',
           'rotation', 'angular_windows', 'window_pairs', 'cast']
