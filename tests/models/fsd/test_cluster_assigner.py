"""Grouping of voted centres on hand-made points: cells, min_points, class-wise links, samples."""
import pytest
import torch

from fsdlite.registry import TASK_UTILS

RANGE = (0, -10, -3, 20, 10, 1)


def _assigner(**kw):
    cfg = dict(type='ClusterAssigner', num_classes=2, cluster_voxel_size=((0.3, 0.3, 4.0), (0.1, 0.1, 4.0)),
               connected_dist=(0.6, 0.15), min_points=2, point_range=RANGE)
    cfg.update(kw)
    return TASK_UTILS.build(cfg)


def _partition(out):
    groups = {}
    for i, c in enumerate(out.point_cluster.tolist()):
        if c != out.capacity:  # the dump slot
            groups.setdefault(c, []).append(i)
    return sorted(groups.values())


def test_hand_made_groups():
    centre = torch.tensor([
        [1.00, 1.00, 0.0], [1.02, 1.05, 0.0],   # 0,1: class 0 cell A
        [1.45, 1.00, 0.0], [1.47, 1.02, 0.0],   # 2,3: class 0 cell 0.45 m away -> linked to A
        [5.00, 1.00, 0.0], [5.05, 1.00, 0.0],   # 4,5: class 0, far -> own cluster
        [1.00, 1.00, 0.0], [1.01, 1.01, 0.0],   # 6,7: class 1 at cell A's place -> separate (class)
        [1.45, 1.00, 0.0], [1.46, 1.00, 0.0],   # 8,9: class 1, 0.45 m > 0.15 -> separate cluster
        [9.00, 9.00, 0.0],                      # 10: class 0 alone in its cell -> dropped
        [1.00, 1.00, 0.0], [1.02, 1.05, 0.0],   # 11,12: class 0 in sample 1 -> separate (sample)
    ])
    cls = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0])
    batch = torch.tensor([0] * 11 + [1, 1])
    out = _assigner()(centre, cls, batch)
    assert _partition(out) == [[0, 1, 2, 3], [4, 5], [6, 7], [8, 9], [11, 12]]
    assert out.num_clusters == out.capacity == 5
    assert out.point_cluster[10] == 5 and int(out.num_near_empty) == 1 and out.dropped.tolist() == [0, 0]
    first = [0, 4, 6, 8, 11]
    assert out.cluster_class[out.point_cluster[first]].tolist() == [0, 0, 1, 1, 0]
    assert out.cluster_batch[out.point_cluster[first]].tolist() == [0, 0, 0, 0, 1]


def test_min_points_one_keeps_everything_and_gap_splits():
    centre = torch.tensor([[2.0, 0.0, 0.0], [2.5, 0.0, 0.0], [3.4, 0.0, 0.0]])  # 0.5 link, 0.9 gap (cell centres)
    out = _assigner(min_points=1)(centre, torch.zeros(3, dtype=torch.int64), torch.zeros(3, dtype=torch.int64))
    assert _partition(out) == [[0, 1], [2]]
    assert int(out.num_near_empty) == 0


def test_empty_and_out_of_range():
    assigner = _assigner()
    out = assigner(torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    assert out.num_clusters == 0 and out.point_cluster.shape == (0,)
    with pytest.raises(ValueError, match='outside point_range'):
        assigner(torch.tensor([[50.0, 0, 0]]), torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64))


def test_invalid_config():
    with pytest.raises(ValueError, match='cluster_voxel_size'):
        _assigner(cluster_voxel_size=(0.3,))
    with pytest.raises(ValueError, match='connected_dist'):
        _assigner(connected_dist=(0.6, -1.0))
    with pytest.raises(ValueError, match='min_points'):
        _assigner(min_points=0)
