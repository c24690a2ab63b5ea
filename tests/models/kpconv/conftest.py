"""Shared fixtures of the KPConv-family tests: small clouds with brute-force radius neighbourhoods
(test-only oracle; the library itself uses fsdlite.ops.radius_neighbors)."""
import pytest
import torch


def brute_force_neighbors(query, support, radius, max_neighbors):
    """(M, H) supports within ``radius`` (strict), nearest first, padded with N (brute force)."""
    n = support.shape[0]
    dist = torch.cdist(query.double(), support.double())
    dist[dist >= radius] = float('inf')
    d, index = dist.sort(1)
    index, d = index[:, :max_neighbors].clone(), d[:, :max_neighbors]
    index[torch.isinf(d)] = n
    if index.shape[1] < max_neighbors:
        index = torch.cat([index, index.new_full((len(query), max_neighbors - index.shape[1]), n)], 1)
    return index


@pytest.fixture
def cloud():
    """dict(points (120, 3) float64 in a unit cube, neighbors (120, 12) within radius 0.35, radius)."""
    g = torch.Generator().manual_seed(0)
    points = torch.rand(120, 3, generator=g, dtype=torch.float64)
    return dict(points=points, neighbors=brute_force_neighbors(points, points, 0.35, 12), radius=0.35)


@pytest.fixture
def neighbor_search():
    """The brute-force radius search above, as a fixture."""
    return brute_force_neighbors


@pytest.fixture
def shape_batch():
    """A collated batch of 6 synthetic shapes (one per primitive class)."""
    from mmengine.dataset import pseudo_collate

    from fsdlite.datasets.point_shapes import PointShapesDataset
    ds = PointShapesDataset(num_samples=6, num_points=(300, 400), seed=3)
    return pseudo_collate([ds[i] for i in range(6)])
