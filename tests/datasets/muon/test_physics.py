"""Muon physics: Highland widths, angle/displacement correlation, spectra."""
import math

import pytest
import torch

from fsdlite.datasets.muon.materials import RADIATION_LENGTH_M
from fsdlite.datasets.muon.physics import (highland_theta0, invert_highland, sample_directions, sample_momentum)
from fsdlite.datasets.muon.simulator import MuonSimulator
from fsdlite.datasets.muon.volume import VoxelGrid


def test_highland_formula_value():
    # 13.6 MeV / 2 GeV * sqrt(0.25) * (1 + 0.038 ln 0.25), by hand
    expected = 0.0136 / 2.0 * 0.5 * (1 + 0.038 * math.log(0.25))
    got = highland_theta0(torch.tensor([0.25, 0.0], dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64))
    assert got[0].item() == pytest.approx(expected, rel=1e-12)
    assert got[1].item() == 0.0


def test_invert_highland_round_trip():
    n = torch.logspace(-2, 2, 9, dtype=torch.float64)
    p = torch.linspace(0.5, 20, 9, dtype=torch.float64)
    torch.testing.assert_close(invert_highland(highland_theta0(n, p), p), n, rtol=1e-4, atol=0)


def _slab_passage(material, thickness, momentum, num=20000, seed=0):
    """Vertical muons through the middle of a one-voxel slab; returns angle and displacement per plane."""
    grid = VoxelGrid((1, 1, 1), thickness)
    sim = MuonSimulator(grid, substeps=40, fixed_momentum=momentum)
    gen = torch.Generator().manual_seed(seed)
    entry = torch.tensor([[thickness / 2, thickness / 2, thickness]], dtype=torch.float64).expand(num, 3)
    slopes = torch.zeros(num, 2, dtype=torch.float64)
    p = torch.full((num,), momentum, dtype=torch.float64)
    x0 = torch.tensor([RADIATION_LENGTH_M[material]], dtype=torch.float64)
    exit_points, slopes_out = sim.propagate(x0, entry, slopes, p, gen)
    return torch.atan(slopes_out).flatten(), (exit_points[:, :2] - entry[:, :2]).flatten()


@pytest.mark.parametrize('material,thickness,momentum', [('iron', 0.1, 3.0), ('lead', 0.05, 1.0),
                                                         ('beryllium', 0.2, 0.5)])
def test_scattering_width_matches_highland(material, thickness, momentum):
    angle, shift = _slab_passage(material, thickness, momentum)
    n = torch.tensor([thickness / RADIATION_LENGTH_M[material]], dtype=torch.float64)
    theta0 = highland_theta0(n, torch.tensor(momentum, dtype=torch.float64)).item()
    # 40,000 projected angles: the rms is known to ~0.4 %; displacement rms = x theta0 / sqrt(3)
    assert angle.std().item() == pytest.approx(theta0, rel=0.03)
    assert shift.std().item() == pytest.approx(thickness * theta0 / math.sqrt(3), rel=0.05)
    corr = torch.corrcoef(torch.stack([angle, shift]))[0, 1].item()
    assert corr == pytest.approx(math.sqrt(3) / 2, abs=0.02)
    assert abs(angle.mean().item()) < 4 * theta0 / math.sqrt(angle.numel())


def test_no_material_means_almost_no_scattering():
    angle, _ = _slab_passage('air', 0.1, 3.0, num=2000)
    assert angle.std().item() < 2e-4


def test_momentum_spectrum_mean_is_sea_level_like():
    p = sample_momentum(200000, torch.Generator().manual_seed(0))
    assert p.min().item() >= 0.5 and p.max().item() <= 200.0
    assert p.mean().item() == pytest.approx(4.0, rel=0.08)


def test_zenith_distribution_is_cos_cubed_through_a_plane():
    max_zenith = math.pi / 3
    slopes = sample_directions(200000, torch.Generator().manual_seed(1), max_zenith)
    cos_z = 1 / (1 + slopes.square().sum(1)).sqrt()
    c0 = math.cos(max_zenith)
    expected_mean = (4 / 5) * (1 - c0 ** 5) / (1 - c0 ** 4)   # E[u] for density ∝ u^3 on [c0, 1]
    assert cos_z.min().item() >= c0 - 1e-9
    assert cos_z.mean().item() == pytest.approx(expected_mean, abs=2e-3)
    phi = torch.atan2(slopes[:, 1], slopes[:, 0])
    assert phi.mean().abs().item() < 0.02   # uniform azimuth
