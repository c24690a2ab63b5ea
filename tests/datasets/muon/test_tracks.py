"""Track fits and PoCA: straight-through and single-kink tracks, then the full simulator."""
import torch

from fsdlite.datasets.muon.materials import RADIATION_LENGTH_M
from fsdlite.datasets.muon.simulator import MuonSimulator
from fsdlite.datasets.muon.tracks import closest_approach, fit_lines
from fsdlite.datasets.muon.volume import VoxelGrid


def test_fit_lines_recovers_noiseless_lines_and_flags_single_hits():
    z = torch.tensor([1.0, 1.2, 1.4], dtype=torch.float64)
    a = torch.tensor([[0.3, -0.2], [1.0, 2.0]], dtype=torch.float64)
    m = torch.tensor([[0.1, -0.5], [0.0, 0.2]], dtype=torch.float64)
    hits = a[:, None] + m[:, None] * z[None, :, None]
    mask = torch.tensor([[True, True, True], [False, True, False]])
    intercept, slope, ok = fit_lines(z, hits, mask)
    assert ok.tolist() == [True, False]
    torch.testing.assert_close(intercept[0], a[0])
    torch.testing.assert_close(slope[0], m[0])
    assert slope[1].abs().sum() == 0


def test_poca_of_single_kink_is_the_kink():
    gen = torch.Generator().manual_seed(0)
    kink = torch.rand(100, 3, generator=gen, dtype=torch.float64)
    v1 = torch.cat([torch.randn(100, 2, generator=gen, dtype=torch.float64) * 0.2, torch.ones(100, 1,
                                                                                               dtype=torch.float64)], 1)
    v2 = v1 + torch.cat([torch.randn(100, 2, generator=gen, dtype=torch.float64) * 0.05,
                         torch.zeros(100, 1, dtype=torch.float64)], 1)
    p1 = kink + 0.7 * v1          # any point on each line
    p2 = kink - 0.4 * v2
    poca, gap, parallel = closest_approach(p1, v1, p2, v2, fallback_z=0.5)
    assert not parallel.any()
    torch.testing.assert_close(poca, kink, atol=1e-9, rtol=0)
    assert gap.abs().max() < 1e-9


def test_poca_of_straight_through_track_uses_the_fallback_height():
    p = torch.tensor([[0.1, 0.2, 1.0]], dtype=torch.float64)
    v = torch.tensor([[0.3, -0.1, 1.0]], dtype=torch.float64)
    poca, gap, parallel = closest_approach(p, v, p - 2 * v, v, fallback_z=0.5)
    assert parallel.tolist() == [True]
    torch.testing.assert_close(poca, p + (0.5 - 1.0) * v)
    assert gap.abs().max() < 1e-12


def test_poca_concentrates_in_a_thin_dense_layer():
    grid = VoxelGrid((4, 4, 8), 0.1)
    x0 = torch.full((grid.num_voxels,), RADIATION_LENGTH_M['air'], dtype=torch.float64)
    layer = grid.coords()[:, 2] == 5                      # z in [0.5, 0.6]
    x0[layer] = RADIATION_LENGTH_M['lead']
    sim = MuonSimulator(grid, resolution=1e-5, fixed_momentum=2.0)
    muons, counts = sim.simulate(x0, 4000, torch.Generator().manual_seed(3))
    assert counts['generated'] == counts['undetected'] + counts['poca_outside'] + counts['kept']
    scattered = muons['dtheta'].norm(dim=1) > 0.01
    assert scattered.sum() > 1000
    z = muons['poca'][scattered, 2]
    assert ((z > 0.48) & (z < 0.62)).float().mean() > 0.9


def test_efficiency_and_counts_are_reported():
    grid = VoxelGrid((3, 3, 2), 0.2)
    sim = MuonSimulator(grid, num_panels=2, efficiency=0.6)
    x0 = torch.full((grid.num_voxels,), RADIATION_LENGTH_M['iron'], dtype=torch.float64)
    muons, counts = sim.simulate(x0, 3000, torch.Generator().manual_seed(4))
    # two panels per side at 60 % efficiency: P(both hit on both sides) = 0.6^4 ~ 0.13
    assert 0.8 < counts['undetected'] / counts['generated'] < 0.92
    assert counts['kept'] == muons['poca'].shape[0]
    assert counts['generated'] == counts['undetected'] + counts['poca_outside'] + counts['kept']
