"""Synthetic point-shape datasets generated on the fly (deterministic by seed).

* :class:`PointShapesDataset` (classification): one analytic primitive per sample -- sphere, box,
  cylinder, cone, torus or plane -- with random proportions, pose, scale, jitter and (optionally) a
  partial view (only the points facing a random viewpoint).  Label = primitive.
* :class:`PrimitiveScenesDataset` (segmentation): a ground plane with several primitives standing on
  it; every point is labelled with its primitive's class (the ground is 'plane').

Sample ``i`` of a split is drawn from ``SeedSequence([seed, split, i])``: reproducible, independent
of the reading order, and disjoint between splits.  Samples are
``dict(inputs=dict(points=(N, 3) float32), data_samples=Det3DDataSample)`` with ``gt_label``
(classification) or ``gt_pts_seg.pts_semantic_mask`` (segmentation).
"""
import numpy as np
import torch
from torch.utils.data import Dataset

from ..registry import DATASETS
from ..structures import Det3DDataSample, PointData
from fsdlite.utils.drop_report import report_dropped

PRIMITIVES = ('sphere', 'box', 'cylinder', 'cone', 'torus', 'plane')
SPLITS = {'train': 0, 'val': 1, 'test': 2}
ROTATIONS = ('none', 'z', 'all')


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _pick_by_area(rng, n, areas):
    """Which of several surface parts each of n points lies on (proportional to area)."""
    p = np.asarray(areas, dtype=np.float64)
    return rng.choice(len(p), size=n, p=p / p.sum())


def sample_primitive(rng, name, n):
    """``n`` surface points and outward normals of a randomly proportioned primitive, roughly unit size.

    Returns:
        tuple: points (n, 3), normals (n, 3) float64.
    """
    if name == 'sphere':
        normals = _unit(rng.normal(size=(n, 3)))
        return normals * rng.uniform(0.6, 1.0), normals
    if name == 'box':
        half = rng.uniform(0.3, 1.0, size=3) / 2 * 1.6
        areas = [half[1] * half[2]] * 2 + [half[0] * half[2]] * 2 + [half[0] * half[1]] * 2
        face = _pick_by_area(rng, n, areas)
        axis, sign = face // 2, np.where(face % 2 == 0, 1.0, -1.0)
        pts = rng.uniform(-1, 1, size=(n, 3)) * half
        pts[np.arange(n), axis] = sign * half[axis]
        normals = np.zeros((n, 3))
        normals[np.arange(n), axis] = sign
        return pts, normals
    if name in ('cylinder', 'cone'):
        radius, height = rng.uniform(0.3, 0.8), rng.uniform(0.6, 1.6)
        slant = np.hypot(radius, height)
        lateral = 2 * np.pi * radius * height if name == 'cylinder' else np.pi * radius * slant
        part = _pick_by_area(rng, n, [lateral, np.pi * radius ** 2] + ([np.pi * radius ** 2] if name == 'cylinder'
                                                                         else []))
        theta = rng.uniform(0, 2 * np.pi, n)
        t = rng.uniform(0, 1, n)
        if name == 'cylinder':
            rad, z = np.full(n, radius), (t - 0.5) * height
            normals = np.stack([np.cos(theta), np.sin(theta), np.zeros(n)], 1)
        else:  # apex at +height/2; uniform area on the lateral surface: r ~ sqrt(u)
            frac = np.sqrt(t)
            rad, z = radius * frac, height / 2 - frac * height
            normals = _unit(np.stack([np.cos(theta) * height, np.sin(theta) * height, np.full(n, radius)], 1))
        caps = part > 0
        cap_r = radius * np.sqrt(rng.uniform(0, 1, n))
        rad = np.where(caps, cap_r, rad)
        z = np.where(part == 1, -height / 2, np.where(part == 2, height / 2, z))
        normals[caps] = 0.0
        normals[caps, 2] = np.where(part[caps] == 1, -1.0, 1.0)
        return np.stack([rad * np.cos(theta), rad * np.sin(theta), z], 1), normals
    if name == 'torus':
        big, small = rng.uniform(0.5, 0.8), rng.uniform(0.12, 0.3)
        theta = rng.uniform(0, 2 * np.pi, 4 * n)
        phi = rng.uniform(0, 2 * np.pi, 4 * n)
        keep = rng.uniform(0, 1, 4 * n) < (big + small * np.cos(phi)) / (big + small)  # uniform in area
        theta, phi = theta[keep][:n], phi[keep][:n]
        ring = np.stack([np.cos(theta), np.sin(theta), np.zeros(len(theta))], 1)
        normals = ring * np.cos(phi)[:, None] + np.array([0, 0, 1.0]) * np.sin(phi)[:, None]
        return ring * big + normals * small, normals
    if name == 'plane':
        half = np.array([rng.uniform(0.5, 1.0), rng.uniform(0.5, 1.0)])
        pts = np.zeros((n, 3))
        pts[:, :2] = rng.uniform(-1, 1, size=(n, 2)) * half
        return pts, np.tile([0, 0, 1.0], (n, 1))
    raise ValueError(f'unknown primitive {name!r}; expected one of {PRIMITIVES}')


def random_rotation(rng, mode):
    """(3, 3) rotation: identity, about z, or uniformly random."""
    if mode == 'none':
        return np.eye(3)
    if mode == 'z':
        a = rng.uniform(0, 2 * np.pi)
        return np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1.0]])
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def partial_view(rng, points, normals, min_keep=0.2):
    """Points whose normal faces a random far viewpoint (a one-sided scan); all points if too few remain."""
    view = _unit(rng.normal(size=3)) * 10.0
    visible = ((view - points) * normals).sum(1) > 0
    return visible if visible.mean() >= min_keep else np.ones(len(points), bool)


def _split_rng(seed, split, index):
    if split not in SPLITS:
        raise ValueError(f'split must be one of {list(SPLITS)}, got {split!r}')
    return np.random.default_rng(np.random.SeedSequence([int(seed), SPLITS[split], int(index)]))


class _GeneratedDataset(Dataset):
    """Length, metainfo and argument checks shared by the generated datasets."""

    def __init__(self, num_samples, split, seed, classes):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 0:
            raise ValueError(f'{type(self).__name__}: num_samples must be an int >= 0, got {num_samples!r}')
        _split_rng(seed, split, 0)
        self.num_samples, self.split, self.seed = num_samples, split, int(seed)
        self.metainfo = dict(classes=tuple(classes))

    def __len__(self):
        return self.num_samples

    def _index(self, index):
        if not -self.num_samples <= index < self.num_samples:
            raise IndexError(f'{type(self).__name__}: index {index} out of range for {self.num_samples} samples')
        return index % self.num_samples


@DATASETS.register_module()
class PointShapesDataset(_GeneratedDataset):
    """Primitive-shape classification (one shape per sample).

    Args:
        num_samples (int): samples in the split (classes cycle, so they are balanced).
        split (str): 'train', 'val' or 'test'.
        seed (int): base seed.
        num_points (tuple[int, int]): range of points per shape (before the partial view).
        rotation (str): pose: 'none', 'z' or 'all'.
        scale (tuple[float, float]): isotropic scale range.
        jitter (float): Gaussian noise sigma.
        partial_prob (float): probability of a one-sided partial view.
        classes (Sequence[str]): subset/order of :data:`PRIMITIVES`.
    """

    def __init__(self, num_samples=1200, split='train', seed=0, num_points=(1024, 2048), rotation='all',
                 scale=(0.8, 1.2), jitter=0.01, partial_prob=0.3, classes=PRIMITIVES):
        unknown = sorted(set(classes) - set(PRIMITIVES))
        if unknown or not classes:
            raise ValueError(f'PointShapesDataset: classes must be a non-empty subset of {PRIMITIVES}, got {classes!r}')
        if rotation not in ROTATIONS:
            raise ValueError(f'PointShapesDataset: rotation must be one of {ROTATIONS}, got {rotation!r}')
        super().__init__(num_samples, split, seed, classes)
        self.num_points, self.rotation, self.scale = tuple(num_points), rotation, tuple(scale)
        self.jitter, self.partial_prob = float(jitter), float(partial_prob)

    def generate(self, index):
        """(points (N, 3) float32, label) of sample ``index``."""
        rng = _split_rng(self.seed, self.split, index)
        label = index % len(self.metainfo['classes'])
        pts, normals = sample_primitive(rng, self.metainfo['classes'][label],
                                        int(rng.integers(self.num_points[0], self.num_points[1] + 1)))
        pts = pts - pts.mean(0)
        if rng.uniform() < self.partial_prob:
            keep = partial_view(rng, pts, normals)
            pts = pts[keep]
        rot = random_rotation(rng, self.rotation)
        pts = pts @ rot.T * rng.uniform(*self.scale) + rng.normal(scale=self.jitter, size=pts.shape)
        return pts.astype(np.float32), label

    def __getitem__(self, index):
        index = self._index(index)
        pts, label = self.generate(index)
        sample = Det3DDataSample(metainfo=dict(sample_idx=index, classes=self.metainfo['classes']))
        sample.gt_label = torch.tensor(label)
        return dict(inputs=dict(points=torch.from_numpy(pts)), data_samples=sample)


@DATASETS.register_module()
class PrimitiveScenesDataset(_GeneratedDataset):
    """Multi-primitive scenes on a ground plane, labelled per point (segmentation).

    Args:
        num_samples (int): scenes in the split.
        split (str), seed (int): as :class:`PointShapesDataset`.
        extent (float): half side of the square ground (m).
        objects (tuple[int, int]): range of primitives per scene.
        point_density (float): points per square metre of surface.
        object_scale (tuple[float, float]): primitive size range (m).
        jitter (float): Gaussian noise sigma.
    Labels index ``classes`` = :data:`PRIMITIVES` (the ground is 'plane').  Objects that find no free
    spot on the ground are skipped, counted in the sample's ``num_skipped_objects`` and reported (a warning the
    first time, totals in :attr:`dropped_totals`).
    """

    def __init__(self, num_samples=200, split='train', seed=0, extent=2.0, objects=(3, 6), point_density=600.0,
                 object_scale=(0.35, 0.7), jitter=0.005):
        super().__init__(num_samples, split, seed, PRIMITIVES)
        self.extent, self.objects, self.point_density = float(extent), tuple(objects), float(point_density)
        self.object_scale, self.jitter = tuple(object_scale), float(jitter)

    def generate(self, index):
        """(points (N, 3) float32, labels (N,) int64, skipped objects) of scene ``index``."""
        rng = _split_rng(self.seed, self.split, index)
        e = self.extent
        n_ground = int(self.point_density * (2 * e) ** 2)
        ground = np.zeros((n_ground, 3))
        ground[:, :2] = rng.uniform(-e, e, size=(n_ground, 2))
        parts, labels, centers = [ground], [np.full(n_ground, PRIMITIVES.index('plane'))], []
        skipped = 0
        for _ in range(int(rng.integers(self.objects[0], self.objects[1] + 1))):
            label = int(rng.integers(0, len(PRIMITIVES) - 1))  # objects: every primitive but the ground plane
            size = rng.uniform(*self.object_scale)
            n = int(self.point_density * 4 * np.pi * size ** 2)
            pts, _ = sample_primitive(rng, PRIMITIVES[label], max(n, 32))
            pts = pts @ random_rotation(rng, 'all').T * size
            center = self._free_spot(rng, centers, size)
            if center is None:  # no free spot: reported in the sample's metainfo
                skipped += 1
                continue
            centers.append((center, size))
            pts[:, :2] += center
            pts[:, 2] += -pts[:, 2].min() + rng.uniform(0, 0.05)
            parts.append(pts)
            labels.append(np.full(len(pts), label))
        pts = np.concatenate(parts) + rng.normal(scale=self.jitter, size=(sum(len(p) for p in parts), 3))
        return pts.astype(np.float32), np.concatenate(labels).astype(np.int64), skipped

    def _free_spot(self, rng, centers, size, tries=50):
        for _ in range(tries):
            c = rng.uniform(-self.extent + size, self.extent - size, size=2)
            if all(np.linalg.norm(c - o) > size + s for o, s in centers):
                return c
        return None

    def __getitem__(self, index):
        index = self._index(index)
        pts, labels, skipped = self.generate(index)
        report_dropped(self, 'num_skipped_objects', skipped, lambda: f'{skipped} objects of scene {index} found no '
                       'free spot on the ground and were left out')
        sample = Det3DDataSample(metainfo=dict(sample_idx=index, classes=PRIMITIVES, num_skipped_objects=skipped))
        sample.gt_pts_seg = PointData(pts_semantic_mask=torch.from_numpy(labels))
        return dict(inputs=dict(points=torch.from_numpy(pts)), data_samples=sample)
