"""Kernel-point dispositions: deterministic generation, caching, scaling and random rotation.

* K <= 30 (and no ``shells``): repulsion optimisation. Many random candidates are relaxed by
  gradient descent on ``E = sum_{i<j} 1/|x_i - x_j| + 5 sum_i |x_i|^2`` (pairwise repulsion,
  attraction to the centre) with clipped, decaying steps; with ``fixed='center'`` point 0 is
  pinned at the origin. The lowest-energy candidate is kept and rescaled so the mean radius of the
  non-centre points equals ``ratio`` (0.66 by default) of the kernel radius.
* larger K or explicit ``shells`` (e.g. ``[1, 14, 28]``): a centre point plus concentric shells
  at radii ``s * 2 / (2 * n_shells - 1)`` (0, 0.4, 0.8 for three shells), points spread on each
  shell by tangential-only repulsion.

Unit dispositions are deterministic (fixed seeds) and cached in memory and on disk under
``$FSDLITE_CACHE/kernels`` (default ``~/.cache/fsdlite/kernels``). :func:`make_kernel_points`
scales them to a radius and applies an optional random rotation (about z only, or any 3D
rotation) drawn from torch's global generator (or ``generator``), so seeded runs repeat.
"""
import os
import tempfile
import threading
from pathlib import Path

import numpy as np
import torch

MAX_REPULSION_POINTS = 30
FIXED = ('center', 'none')
ROTATIONS = ('none', 'z', 'all')
_VERSION = 1
_MEMORY = {}
_LOCK = threading.Lock()


def cache_dir():
    """Folder of the on-disk kernel cache: ``$FSDLITE_CACHE/kernels`` or ``~/.cache/fsdlite/kernels``."""
    root = os.environ.get('FSDLITE_CACHE')
    return Path(root).expanduser() / 'kernels' if root else Path.home() / '.cache' / 'fsdlite' / 'kernels'


def default_shells(num_points, max_per_shell=MAX_REPULSION_POINTS):
    """Centre + S outer shells holding points proportionally to their radius (s = 1..S), with the
    fewest shells whose outermost one holds at most ``max_per_shell`` points (43 -> [1, 14, 28])."""
    rest, n_shells = num_points - 1, 1
    while 2 * rest / (n_shells + 1) > max_per_shell:
        n_shells += 1
    weights = np.arange(1, n_shells + 1, dtype=np.float64)
    counts = np.floor(rest * weights / weights.sum()).astype(int)
    counts[-1] += rest - counts.sum()
    return [1] + counts.tolist()


def _pairwise_force(x):
    """Sum over j of (x_i - x_j) / |x_i - x_j|^3 (the repulsive force; minus the gradient of 1/r)."""
    diff = x[..., :, None, :] - x[..., None, :, :]
    r2 = (diff * diff).sum(-1)
    k = x.shape[-2]
    r2[..., np.arange(k), np.arange(k)] = np.inf
    r2 = np.maximum(r2, 1e-12)
    return (diff / r2[..., None] ** 1.5).sum(-2), 0.5 * (1.0 / np.sqrt(r2)).sum((-1, -2))


def _clip_rows(step, max_norm):
    norm = np.linalg.norm(step, axis=-1, keepdims=True)
    return step * np.minimum(1.0, max_norm / np.maximum(norm, 1e-12))


def repulsion_dispositions(num_points, dimension=3, fixed='center', ratio=0.66, candidates=16, max_iter=600,
                           tol=1e-5, seed=0):
    """Relax ``candidates`` random dispositions and return the lowest-energy one, (K, D) float64.

    The mean radius of the non-centre points is rescaled to ``ratio``.
    """
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (candidates, num_points, dimension)) * 0.7
    pinned = fixed == 'center'
    if pinned:
        x[:, 0] = 0.0
    lr, previous = 1e-2, None
    for _ in range(max_iter):
        force, _ = _pairwise_force(x)
        grad = 10.0 * x - force
        if pinned:
            grad[:, 0] = 0.0
        norm = np.linalg.norm(grad, axis=-1)
        if previous is not None and np.abs(norm - previous).max() < tol:
            break
        previous = norm
        x -= _clip_rows(lr * grad, 0.05)
        lr *= 0.9995
    _, repulsion = _pairwise_force(x)
    energy = repulsion + 5.0 * (x * x).sum((-1, -2))
    best = x[int(np.argmin(energy))]
    movable = best[1:] if pinned else best
    mean_radius = np.linalg.norm(movable, axis=-1).mean() if len(movable) else 0.0
    if mean_radius > 0:
        best = best * (ratio / mean_radius)
    return best


def shell_dispositions(shells, dimension=3, candidates=4, iterations=400, seed=0):
    """Centre point + concentric shells at radii ``s * 2 / (2 n - 1)``, (sum(shells), D) float64.

    Points of each shell repel all others tangentially (the radial part of the force is removed and
    points are projected back onto their shell).
    """
    n = len(shells)
    radii = np.repeat([s * 2.0 / (2 * n - 1) for s in range(n)], shells)
    outer = radii > 0
    rng = np.random.default_rng(seed)
    best, best_energy = None, np.inf
    for _ in range(candidates):
        x = rng.normal(size=(len(radii), dimension))
        x = x / np.linalg.norm(x, axis=-1, keepdims=True) * radii[:, None]
        lr = 0.05
        for _ in range(iterations):
            force, _ = _pairwise_force(x)
            unit = x[outer] / radii[outer, None]
            tangential = force[outer] - (force[outer] * unit).sum(-1, keepdims=True) * unit
            moved = x[outer] + _clip_rows(lr * tangential, 0.05)
            x[outer] = moved / np.linalg.norm(moved, axis=-1, keepdims=True) * radii[outer, None]
            lr *= 0.998
        energy = _pairwise_force(x)[1]
        if energy < best_energy:
            best, best_energy = x.copy(), energy
    return best


def _check(num_points, dimension, fixed, shells, ratio):
    if isinstance(num_points, bool) or not isinstance(num_points, int) or num_points < 1:
        raise ValueError(f'kernel points: num_points must be an int >= 1, got {num_points!r}')
    if dimension not in (2, 3):
        raise ValueError(f'kernel points: dimension must be 2 or 3, got {dimension!r}')
    if fixed not in FIXED:
        raise ValueError(f'kernel points: fixed must be one of {list(FIXED)}, got {fixed!r}')
    if not (isinstance(ratio, (int, float)) and 0 < ratio <= 1):
        raise ValueError(f'kernel points: ratio (mean radius / kernel radius) must be in (0, 1], got {ratio!r}')
    if shells is not None:
        shells = [int(s) for s in shells]
        if len(shells) < 2 or shells[0] != 1 or min(shells) < 1 or sum(shells) != num_points:
            raise ValueError(f'kernel points: shells must start with 1 (the centre), have >= 2 entries >= 1 and sum '
                             f'to num_points={num_points}, got {shells!r}')
    return shells


def unit_kernel_points(num_points, dimension=3, fixed='center', shells=None, ratio=0.66):
    """Deterministic unit-radius disposition (K, D) float64, cached in memory and on disk.

    Args:
        num_points (int): K.
        dimension (int): 2 or 3.
        fixed (str): 'center' (point 0 at the origin) or 'none' (repulsion mode only).
        shells (list[int], optional): shell sizes (first 1); default: repulsion for K <= 30,
            :func:`default_shells` above.
        ratio (float): mean radius of the non-centre points (repulsion mode).
    """
    shells = _check(num_points, dimension, fixed, shells, ratio)
    if shells is None and num_points > MAX_REPULSION_POINTS:
        shells = default_shells(num_points)
    if shells is not None:
        key = f'k{num_points:03d}_shells-{"-".join(map(str, shells))}_{dimension}d_v{_VERSION}'
    else:
        key = f'k{num_points:03d}_{fixed}_r{ratio:.4f}_{dimension}d_v{_VERSION}'
    with _LOCK:
        if key in _MEMORY:
            return _MEMORY[key].copy()
        path = cache_dir() / f'{key}.npy'
        points = None
        if path.is_file():
            try:
                points = np.load(path)
            except (OSError, ValueError):
                points = None  # unreadable cache entry: regenerate and overwrite
            if points is not None and points.shape != (num_points, dimension):
                points = None
        if points is None:
            points = (shell_dispositions(shells, dimension) if shells is not None
                      else repulsion_dispositions(num_points, dimension, fixed, ratio))
            _write_cache(path, points)
        _MEMORY[key] = points
        return points.copy()


def _write_cache(path, points):
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix='.npy', delete=False) as f:
            np.save(f, points)
        os.replace(f.name, path)
    except OSError:
        pass  # a read-only cache folder only costs regeneration next time


def random_rotation(dimension, mode, generator=None, dtype=torch.float32):
    """(D, D) rotation: identity ('none'), about the z axis ('z', or the plane in 2D) or any ('all')."""
    if mode not in ROTATIONS:
        raise ValueError(f'kernel points: rotation must be one of {list(ROTATIONS)}, got {mode!r}')
    if mode == 'none':
        return torch.eye(dimension, dtype=dtype)
    if mode == 'z' or dimension == 2:
        theta = float(torch.rand((), generator=generator)) * 2 * np.pi
        c, s = np.cos(theta), np.sin(theta)
        rot = torch.eye(dimension, dtype=torch.float64)
        rot[:2, :2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
        return rot.to(dtype)
    q, r = torch.linalg.qr(torch.randn(dimension, dimension, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))[None]
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q.to(dtype)


def make_kernel_points(num_points, radius, dimension=3, fixed='center', shells=None, ratio=0.66, rotation='z',
                       generator=None, dtype=torch.float32):
    """Kernel points of one layer: the cached unit disposition scaled by ``radius`` and rotated.

    Returns:
        Tensor: (K, D) kernel points (row 0 at the origin with ``fixed='center'`` or shells).
    """
    if not (isinstance(radius, (int, float)) and np.isfinite(radius) and radius > 0):
        raise ValueError(f'kernel points: radius must be a finite number > 0, got {radius!r}')
    unit = torch.from_numpy(unit_kernel_points(num_points, dimension, fixed, shells, ratio))
    rot = random_rotation(dimension, rotation, generator, torch.float64)
    return (unit @ rot.T * radius).to(dtype)
