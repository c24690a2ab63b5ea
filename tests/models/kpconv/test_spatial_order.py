"""Morton ordering of point clouds (used by KPDataPreprocessor and the memory benchmark)."""
import torch

from fsdlite.models.kpconv.spatial_order import morton_codes, spatial_order


def test_morton_codes_interleave_axis_bits():
    cells = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [2, 0, 0], [3, 5, 6]],
                         dtype=torch.float64)
    codes = morton_codes(cells + 0.5, 1.0)
    expected = [0, 1, 2, 4, 7, 8, int('110101011', 2)]  # x bit0, y bit1, z bit2, then the next bit of each
    assert codes.tolist() == expected


def test_spatial_order_is_a_permutation_grouped_by_sample_and_local():
    g = torch.Generator().manual_seed(0)
    points = torch.rand(4000, 3, generator=g)
    batch = torch.sort(torch.randint(0, 3, (4000,), generator=g)).values
    order = spatial_order(points, 0.05, batch)
    assert torch.equal(torch.sort(order).values, torch.arange(4000))
    assert torch.all(batch[order][1:] >= batch[order][:-1])
    ordered = points[order]
    step = (ordered[1:] - ordered[:-1]).norm(dim=1)[batch[order][1:] == batch[order][:-1]]
    random_step = (points[1:] - points[:-1]).norm(dim=1)
    assert step.median() < 0.25 * random_step.median()  # consecutive points are neighbours in space
    assert spatial_order(points[:0], 0.05).numel() == 0
