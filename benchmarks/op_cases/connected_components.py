"""connected_components: the C++ op vs the pure-torch reference and scipy (cKDTree pairs + csgraph).

Workloads (FSD's clustering, reference/fsd.md §1.1/§1.2 step 7):
* voted centres: 3 classes with FSD's class-wise ``connected_dist`` (Car 0.6, Ped 0.1, Cyc 0.4 m,
  xy metric), objects of 60-300 votes scattered around their centres plus 30 % clutter, over a
  150 m x 150 m scene, 2 samples; 20k / 60k / 120k points.
* a raw lidar frame (spconv's Waymo-range benchmark-pc, 120k of its 198k points, xy, 0.2 m):
  dense near the sensor (up to ~450 points per 0.3 m cell).
The scipy variant times the whole path: one cKDTree per (sample, class) + query_pairs (strict:
radius nextafter(t, 0)) + sparse adjacency + csgraph.connected_components.
"""
import numpy as np
import torch

from op_cases._point_clouds import SHARED
from op_cases._scaffold import case

THRESHOLDS = (0.6, 0.1, 0.4)  # FSD Waymo connected_dist: Car, Ped, Cyc
WAYMO_PC = SHARED / 'spconv_waymo' / 'benchmark-pc.npz'  # traveller59/spconv@263d6b4:test/data/benchmark-pc.npz
LABELS = ('fsdlite.ops', 'torch reference', 'scipy cKDTree+csgraph')


def voted_centres(n, seed=0, batches=2):
    """(points (n, 3), batch (n,), class_ids (n,)) imitating FSD's voted foreground centres."""
    g = np.random.default_rng(seed)
    spread = np.array([0.35, 0.08, 0.2])  # vote scatter per class (m)
    n_fg = int(n * 0.7)
    sizes = g.integers(60, 300, size=n_fg // 60)
    sizes = sizes[np.cumsum(sizes) <= n_fg]
    sizes = np.append(sizes, n_fg - sizes.sum())
    obj_cls = g.integers(0, 3, size=len(sizes))
    obj_xy = g.uniform(-75, 75, size=(len(sizes), 2))
    obj_b = g.integers(0, batches, size=len(sizes))
    cls = np.repeat(obj_cls, sizes)
    xy = np.repeat(obj_xy, sizes, 0) + g.normal(size=(n_fg, 2)) * spread[cls][:, None]
    clutter = n - n_fg
    xy = np.concatenate([xy, g.uniform(-75, 75, size=(clutter, 2))])
    cls = np.concatenate([cls, g.integers(0, 3, size=clutter)])
    batch = np.concatenate([np.repeat(obj_b, sizes), g.integers(0, batches, size=clutter)])
    z = g.normal(size=(n, 1)) * 0.3
    points = torch.from_numpy(np.concatenate([xy, z], 1).astype(np.float32))
    return points, torch.from_numpy(batch), torch.from_numpy(cls)


def lidar_frame(n, seed=0):
    """(n, 3) float32: ``n`` random points (seed ``seed``, file order kept) of spconv's Waymo-range frame."""
    pc = np.load(WAYMO_PC)['pc']
    sel = np.sort(np.random.default_rng(seed).choice(len(pc), n, replace=False))
    return torch.from_numpy(pc[sel])


def scipy_components(points, thresholds, batch, class_ids):
    """Labels of the strict-threshold graph via cKDTree + scipy.sparse.csgraph (per sample and class)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree
    xy = points[:, :2].double().numpy()
    keys = batch.numpy() * len(thresholds) + class_ids.numpy()
    rows, cols = [], []
    for key in np.unique(keys):
        idx = np.nonzero(keys == key)[0]
        t = thresholds[int(key) % len(thresholds)]
        pairs = cKDTree(xy[idx]).query_pairs(np.nextafter(t, 0), output_type='ndarray')
        rows.append(idx[pairs[:, 0]])
        cols.append(idx[pairs[:, 1]])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    n = len(xy)
    return connected_components(coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n)), directed=False)


def work(variant, workload, n):
    """Zero-arg callable running one variant on one workload (also used by run_isolated)."""
    from fsdlite.ops import connected_components
    from fsdlite.ops.connected_components.reference import connected_components_reference
    if workload == 'voted':
        points, batch, classes = voted_centres(n)
        thresholds = THRESHOLDS
    else:
        points = lidar_frame(n)
        batch = classes = torch.zeros(n, dtype=torch.long)
        thresholds = (0.2,)
    thr = torch.tensor(thresholds)
    if variant == 'fsdlite.ops':
        return lambda: connected_components(points, thr, batch=batch, class_ids=classes)
    if variant == 'torch reference':
        return lambda: connected_components_reference(points, thr, batch=batch, class_ids=classes)
    return lambda: scipy_components(points, thresholds, batch, classes)


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): voted-centre workloads (20k / 60k / 120k) and the 120k-point
    lidar frame (skipped when absent); ``quick``: 5k voted, 10k lidar."""
    sizes = [('voted', 5_000), ('lidar', 10_000)] if quick else \
        [('voted', 20_000), ('voted', 60_000), ('voted', 120_000), ('lidar', 120_000)]
    if not WAYMO_PC.is_file():
        print(f'[connected_components] {WAYMO_PC} is absent: skipping the lidar-frame case')
        sizes = [s for s in sizes if s[0] != 'lidar']
    names = {'voted': 'voted centres, 3 cls, 2 samples', 'lidar': 'waymo lidar xy 0.2 m'}
    return [case('connected_components', f'{n // 1000}k {names[workload]}', work, LABELS, 'torch reference',
                 workload=workload, n=n) for workload, n in sizes]
