"""Cosmic-muon kinematics and multiple Coulomb scattering (PDG Highland formula), vectorised in torch.

All functions take a :class:`torch.Generator` so a simulation is reproducible from its seed.
Units: metres, GeV/c, radians.  Muons have beta = 1 and unit charge.
"""
import math

import torch

HIGHLAND_A_GEV = 0.0136  # 13.6 MeV
HIGHLAND_B = 0.038


def highland_theta0(n_x0, momentum):
    """Projected-angle rms after ``n_x0`` radiation lengths: (A/p) sqrt(n) (1 + B ln n); 0 where n = 0.

    Args:
        n_x0 (Tensor): (N,) traversed thickness in radiation lengths (x / X0), >= 0.
        momentum (Tensor | float): (N,) or scalar momentum in GeV/c.
    Returns:
        Tensor: (N,) theta0 in radians.
    """
    n = n_x0.clamp(min=0)
    safe = n.clamp(min=1e-30)
    theta = HIGHLAND_A_GEV / momentum * safe.sqrt() * (1 + HIGHLAND_B * safe.log())
    return torch.where(n > 0, theta, torch.zeros_like(theta))


def invert_highland(theta0, momentum, iterations=6):
    """Thickness in radiation lengths whose Highland width is ``theta0`` (fixed-point on the log term).

    Args:
        theta0 (Tensor): (N,) projected-angle rms estimates (> 0).
        momentum (Tensor): (N,) momenta in GeV/c.
    Returns:
        Tensor: (N,) x / X0.
    """
    naive = (theta0 * momentum / HIGHLAND_A_GEV).square()
    n = naive
    for _ in range(iterations):
        n = naive / (1 + HIGHLAND_B * n.clamp(min=1e-30).log()).clamp(min=0.2).square()
    return n


def sample_momentum(num, generator, p_min=0.5, p_max=200.0, gamma=2.7, offset=2.2):
    """Sea-level-like momenta from dN/dp ∝ (p + offset)^-gamma on [p_min, p_max] (inverse CDF).

    The defaults give a mean of about 4 GeV/c, the sea-level cosmic-muon mean.
    Returns:
        Tensor: (num,) float64 momenta in GeV/c.
    """
    u = torch.rand(num, generator=generator, dtype=torch.float64)
    e = 1.0 - gamma
    lo, hi = (p_min + offset) ** e, (p_max + offset) ** e
    return (lo + u * (hi - lo)) ** (1.0 / e) - offset


def sample_directions(num, generator, max_zenith=math.pi / 4):
    """Downward directions with intensity ∝ cos²(zenith) per solid angle, crossing a horizontal plane.

    The rate through a horizontal surface carries one more cos(zenith), so cos(zenith) is drawn
    with density ∝ cos³ on [cos(max_zenith), 1]; the azimuth is uniform.
    Returns:
        Tensor: (num, 2) slopes (dx/ddepth, dy/ddepth) = tan(zenith) (cos phi, sin phi).
    """
    c_min4 = math.cos(max_zenith) ** 4
    u = torch.rand(num, generator=generator, dtype=torch.float64)
    cos_z = (c_min4 + u * (1 - c_min4)) ** 0.25
    tan_z = (1 - cos_z.square()).clamp(min=0).sqrt() / cos_z
    phi = torch.rand(num, generator=generator, dtype=torch.float64) * (2 * math.pi)
    return torch.stack([tan_z * phi.cos(), tan_z * phi.sin()], 1)


def scattering_step(n_before, n_step, momentum, path, generator):
    """Deflection and correlated lateral displacement of one step, in two independent planes.

    The step variance is theta0(n_before + n_step)^2 - theta0(n_before)^2, so the total over a
    homogeneous slab reproduces the Highland width of the whole slab (the log term is not additive).
    Per plane, with z1, z2 standard normals: angle = z2 s, displacement = path s (z1/sqrt(12) + z2/2).

    Args:
        n_before (Tensor): (N,) radiation lengths traversed before this step.
        n_step (Tensor): (N,) radiation lengths of this step.
        momentum (Tensor): (N,) GeV/c.
        path (Tensor): (N,) step path length in metres.
    Returns:
        tuple: ``angles`` (N, 2) and ``displacements`` (N, 2).
    """
    var = highland_theta0(n_before + n_step, momentum).square() - highland_theta0(n_before, momentum).square()
    sigma = var.clamp(min=0).sqrt().unsqueeze(1)
    z = torch.randn(2, n_step.shape[0], 2, generator=generator, dtype=torch.float64)
    angles = z[1] * sigma
    displacements = path.unsqueeze(1) * sigma * (z[0] / math.sqrt(12.0) + z[1] / 2)
    return angles, displacements
