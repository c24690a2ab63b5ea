"""Vectorised simulation of cosmic muons crossing a voxelised passive volume between detector panels.

Pipeline (all muons at once, float64, reproducible from a :class:`torch.Generator`):

1. **generate**: entry points uniform over the top face (plus ``entry_margin``), cos²-zenith
   directions and a cosmic momentum spectrum (or a fixed momentum);
2. **propagate**: ``substeps`` steps per voxel layer; each step looks up X0 of the voxel at the step
   midpoint (air outside the volume), applies Highland multiple scattering in the x-z and y-z planes
   with the correlated lateral displacement, and moves the muon (:mod:`.physics`);
3. **detect**: straight lines to ``num_panels`` panels above and below the volume, Gaussian hit
   resolution, per-panel efficiency;
4. **reconstruct**: fitted in/out tracks, PoCA, projected scattering angles, displacement at the
   PoCA and a per-muon X0 estimate (Highland inverted over the path through the volume).

Simplifications: no energy loss (the momentum is constant along the track), small-angle projected
scattering, panels larger than the volume, no scattering outside the passive volume's voxels.

Muons with fewer than two hits on a side are *undetected*; muons whose PoCA lies outside the
passive volume are *outside*.  Both are counted in the returned ``counts``, never silently lost.
"""
import math

import torch

from .physics import (invert_highland, sample_directions, sample_momentum, scattering_step)
from .materials import RADIATION_LENGTH_M
from .tracks import closest_approach, fit_lines


class MuonSimulator:
    """Simulator for one :class:`~.volume.VoxelGrid` geometry.

    Args:
        grid (VoxelGrid): passive volume geometry.
        num_panels (int): detector panels above and (as many) below the volume.
        panel_gap (float): distance (m) from the volume to the nearest panel.
        panel_spacing (float): distance (m) between consecutive panels.
        resolution (float): hit resolution (m, Gaussian sigma per coordinate).
        efficiency (float): probability that a panel records a hit.
        substeps (int): propagation steps per voxel layer.
        max_zenith (float): largest zenith angle (rad).
        fixed_momentum (float, optional): use this momentum (GeV/c) for every muon instead of the spectrum.
        momentum_spectrum (dict): keyword arguments of :func:`.physics.sample_momentum`.
        momentum_resolution (float): relative Gaussian smearing of the momentum used for the X0 estimate.
        entry_margin (float): entry points are drawn over the top face grown by this margin (m).
    """

    def __init__(self, grid, num_panels=3, panel_gap=0.1, panel_spacing=0.1, resolution=1e-4, efficiency=1.0,
                 substeps=4, max_zenith=math.pi / 4, fixed_momentum=None, momentum_spectrum=None,
                 momentum_resolution=0.0, entry_margin=0.0):
        if num_panels < 2:
            raise ValueError(f'MuonSimulator: num_panels must be >= 2 to fit a track, got {num_panels}')
        if not 0 < efficiency <= 1:
            raise ValueError(f'MuonSimulator: efficiency must be in (0, 1], got {efficiency}')
        if resolution < 0 or momentum_resolution < 0:
            raise ValueError(f'MuonSimulator: resolutions must be >= 0, got resolution={resolution}, '
                             f'momentum_resolution={momentum_resolution}')
        if substeps < 1:
            raise ValueError(f'MuonSimulator: substeps must be >= 1, got {substeps}')
        self.grid = grid
        self.resolution = float(resolution)
        self.efficiency = float(efficiency)
        self.substeps = int(substeps)
        self.max_zenith = float(max_zenith)
        self.fixed_momentum = fixed_momentum
        self.momentum_spectrum = dict(momentum_spectrum or {})
        self.momentum_resolution = float(momentum_resolution)
        self.entry_margin = float(entry_margin)
        offsets = panel_gap + panel_spacing * torch.arange(num_panels, dtype=torch.float64)
        self.panels_above = grid.height + offsets          # (P,) heights, nearest first
        self.panels_below = -offsets

    # ------------------------------------------------------------------------------ stages
    def generate(self, num, generator):
        """Entry points (num, 3) on the top face, slopes (num, 2) dx/ddepth, momenta (num,)."""
        extent = self.grid.extent
        xy = torch.rand(num, 2, generator=generator, dtype=torch.float64)
        xy = xy * (extent[:2] + 2 * self.entry_margin) - self.entry_margin
        entry = torch.cat([xy, torch.full((num, 1), self.grid.height, dtype=torch.float64)], 1)
        slopes = sample_directions(num, generator, self.max_zenith)
        if self.fixed_momentum is not None:
            momentum = torch.full((num,), float(self.fixed_momentum), dtype=torch.float64)
        else:
            momentum = sample_momentum(num, generator, **self.momentum_spectrum)
        return entry, slopes, momentum

    def propagate(self, x0, entry, slopes, momentum, generator):
        """Carry muons down through the volume with multiple scattering.

        Args:
            x0 (Tensor): (V,) radiation length (m) of each voxel.
            entry (Tensor): (N, 3) entry points at the top face; slopes (N, 2) dx/ddepth; momentum (N,).
        Returns:
            tuple: exit points (N, 3) at z = 0 and exit slopes (N, 2).
        """
        x0 = x0.to(torch.float64)
        xy = entry[:, :2].clone()
        angles = torch.atan(slopes)
        n_cum = torch.zeros(entry.shape[0], dtype=torch.float64)
        dz = self.grid.voxel_size / self.substeps
        air = RADIATION_LENGTH_M['air']
        for step in range(self.grid.shape[2] * self.substeps):
            tan = torch.tan(angles)
            depth_mid = (step + 0.5) * dz
            mid = torch.cat([xy + tan * (dz / 2), (self.grid.height - depth_mid) * torch.ones_like(xy[:, :1])], 1)
            voxel, inside = self.grid.locate(mid)
            local_x0 = torch.where(inside, x0[voxel], torch.full_like(n_cum, air))
            path = dz * (1 + tan.square().sum(1)).sqrt()
            n_step = path / local_x0
            d_angle, d_lateral = scattering_step(n_cum, n_step, momentum, path, generator)
            xy = xy + tan * dz + d_lateral / torch.cos(angles)
            angles = angles + d_angle
            n_cum = n_cum + n_step
        exit_points = torch.cat([xy, torch.zeros_like(xy[:, :1])], 1)
        return exit_points, torch.tan(angles)

    def detect(self, entry, slopes_in, exit_points, slopes_out, generator):
        """Hits on the panels: ``(hits_above (N, P, 2), mask_above, hits_below, mask_below)``."""
        out = []
        for point, slope, heights in ((entry, slopes_in, self.panels_above),
                                      (exit_points, slopes_out, self.panels_below)):
            depth = point[:, 2:3] - heights.unsqueeze(0)                      # (N, P), negative above
            hits = point[:, None, :2] + slope[:, None, :] * depth.unsqueeze(2)
            hits = hits + self.resolution * torch.randn(hits.shape, generator=generator, dtype=torch.float64)
            mask = torch.rand(hits.shape[:2], generator=generator, dtype=torch.float64) < self.efficiency
            out += [hits, mask]
        return tuple(out)

    def reconstruct(self, hits_above, mask_above, hits_below, mask_below, momentum, generator):
        """Fitted tracks -> per-muon PoCA, angles, displacement and X0 estimate (see :meth:`simulate`)."""
        a_in, m_in, ok_in = fit_lines(self.panels_above, hits_above, mask_above)
        a_out, m_out, ok_out = fit_lines(self.panels_below, hits_below, mask_below)
        height = self.grid.height
        ones = torch.ones_like(m_in[:, :1])
        p1 = torch.cat([a_in + m_in * height, height * ones], 1)
        p2 = torch.cat([a_out, 0 * ones], 1)
        poca, gap, parallel = closest_approach(p1, torch.cat([m_in, ones], 1), p2, torch.cat([m_out, ones], 1),
                                               fallback_z=height / 2)
        dtheta = (torch.atan(m_out) - torch.atan(m_in)).abs()
        measured_p = momentum
        if self.momentum_resolution > 0:
            smear = torch.randn(momentum.shape, generator=generator, dtype=torch.float64)
            measured_p = momentum * (1 + self.momentum_resolution * smear).clamp(min=0.1)
        theta0 = (dtheta.square().mean(1)).sqrt().clamp(min=1e-6)
        path = height * (1 + m_in.square().sum(1)).sqrt()
        x0_estimate = path / invert_highland(theta0, measured_p).clamp(min=1e-12)
        return dict(poca=poca, dtheta=dtheta, dxy=gap[:, :2], x0_estimate=x0_estimate, momentum=measured_p,
                    parallel=parallel, detected=ok_in & ok_out)

    def simulate(self, x0, num_muons, generator):
        """Simulate ``num_muons`` muons through a volume and keep the usable ones.

        Args:
            x0 (Tensor): (V,) radiation length (m) per voxel.
            num_muons (int): muons to generate.
            generator (torch.Generator): random source.
        Returns:
            tuple: ``muons`` dict of the kept muons (K rows): ``poca`` (K, 3), ``dtheta`` (K, 2)
            |theta_out - theta_in| per projection, ``dxy`` (K, 2) displacement at the PoCA,
            ``x0_estimate`` (K,), ``momentum`` (K,) measured, ``parallel`` (K,) bool (PoCA fallback used);
            and ``counts`` dict (generated, undetected, poca_outside, kept).
        """
        if x0.shape != (self.grid.num_voxels,):
            raise ValueError(f'MuonSimulator.simulate: x0 must have shape ({self.grid.num_voxels},) for grid '
                             f'{self.grid.shape}, got {tuple(x0.shape)}')
        entry, slopes, momentum = self.generate(num_muons, generator)
        exit_points, slopes_out = self.propagate(x0, entry, slopes, momentum, generator)
        hits = self.detect(entry, slopes, exit_points, slopes_out, generator)
        rec = self.reconstruct(*hits, momentum, generator)
        _, inside = self.grid.locate(rec['poca'])
        detected = rec.pop('detected')
        keep = detected & inside
        counts = dict(generated=num_muons, undetected=int((~detected).sum()),
                      poca_outside=int((detected & ~inside).sum()), kept=int(keep.sum()))
        return {name: value[keep] for name, value in rec.items()}, counts
