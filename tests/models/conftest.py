"""Shared helpers for the model tests: hand-made lidar samples in the dataset format."""
import pytest
import torch

from fsdlite.structures import Det3DDataSample, InstanceData, PointData

VOXEL_SIZE = (0.5, 0.5, 0.5)
POINT_RANGE = (-8.0, -8.0, -2.0, 8.0, 8.0, 2.0)
CLASSES = ('Car', 'Pedestrian', 'Cyclist')


def make_sample(points, labels=None, boxes=None, box_labels=None):
    """``(points, Det3DDataSample)`` in the dataset item format (labels default to background)."""
    n = points.shape[0]
    sample = Det3DDataSample(metainfo=dict(classes=CLASSES, num_classes=len(CLASSES)))
    if labels is None:
        labels = torch.full((n,), len(CLASSES), dtype=torch.long)
    sample.gt_pts_seg = PointData(pts_semantic_mask=labels.long())
    sample.gt_instances_3d = InstanceData(
        bboxes_3d=boxes if boxes is not None else torch.zeros(0, 7),
        labels_3d=box_labels if box_labels is not None else torch.zeros(0, dtype=torch.long))
    return points, sample


def random_scene(n, seed, with_box=True, point_range=POINT_RANGE):
    """A tiny scene in ``point_range``: uniform clutter (background) plus a dense block labelled Car (0)."""
    g = torch.Generator().manual_seed(seed)
    low = torch.tensor(point_range[:3], dtype=torch.float32)
    high = torch.tensor(point_range[3:], dtype=torch.float32)
    xyz = torch.rand(n, 3, generator=g) * (high - low) * 0.98 + low + 0.01 * (high - low)
    labels = torch.full((n,), len(CLASSES), dtype=torch.long)
    centre = (low + high) / 2
    box = torch.tensor([[centre[0] + 2.0, centre[1] + 1.0, low[2] + 0.5, 4.0, 2.0, 1.5, 0.0]])
    if with_box:
        k = n // 3
        size = torch.tensor([4.0, 2.0, 1.5])
        xyz[:k] = torch.rand(k, 3, generator=g) * size + box[0, :3] - torch.tensor([2.0, 1.0, 0.0])
        labels[:k] = 0
    points = torch.cat([xyz, torch.rand(n, 1, generator=g)], 1)
    return make_sample(points, labels, box, torch.zeros(1, dtype=torch.long))


def collate(samples):
    """pseudo_collate of ``(points, sample)`` pairs."""
    return dict(inputs=dict(points=[p for p, _ in samples]), data_samples=[s for _, s in samples])


@pytest.fixture
def tiny_batch():
    """Two small scenes (the second without objects)."""
    return collate([random_scene(300, 0), random_scene(200, 1, with_box=False)])


@pytest.fixture
def lidar():
    """Namespace of the helpers above (test modules cannot import conftest under importlib mode)."""
    import types
    return types.SimpleNamespace(make_sample=make_sample, random_scene=random_scene, collate=collate,
                                 voxel_size=VOXEL_SIZE, point_range=POINT_RANGE, classes=CLASSES)
