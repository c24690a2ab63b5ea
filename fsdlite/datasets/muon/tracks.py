"""Track reconstruction from detector hits: straight-line fits and the point of closest approach (PoCA)."""
import torch


def fit_lines(z, hits, mask):
    """Least-squares line x(z) = a + m z per muon and projection, from the hits that were recorded.

    All hits have the same resolution, so the inverse-variance weights are equal.

    Args:
        z (Tensor): (P,) panel heights.
        hits (Tensor): (N, P, 2) measured (x, y) at each panel.
        mask (Tensor): (N, P) bool, hit recorded (panel efficiency).
    Returns:
        tuple: ``intercept`` (N, 2) at z = 0, ``slope`` (N, 2) dx/dz, ``ok`` (N,) bool (>= 2 hits at
        distinct heights; other rows are 0).
    """
    w = mask.to(hits.dtype)
    zz = z.to(hits.dtype).unsqueeze(0)
    s0 = w.sum(1)
    sz = (w * zz).sum(1)
    szz = (w * zz * zz).sum(1)
    sx = (w.unsqueeze(2) * hits).sum(1)
    szx = (w.unsqueeze(2) * zz.unsqueeze(2) * hits).sum(1)
    det = s0 * szz - sz * sz
    ok = (s0 >= 2) & (det > 1e-12 * s0.clamp(min=1) ** 2)
    safe = torch.where(ok, det, torch.ones_like(det)).unsqueeze(1)
    slope = (s0.unsqueeze(1) * szx - sz.unsqueeze(1) * sx) / safe
    intercept = (sx - slope * sz.unsqueeze(1)) / s0.clamp(min=1).unsqueeze(1)
    zero = torch.zeros_like(slope)
    return torch.where(ok.unsqueeze(1), intercept, zero), torch.where(ok.unsqueeze(1), slope, zero), ok


def closest_approach(p1, v1, p2, v2, fallback_z, parallel_tol=1e-10):
    """PoCA of an incoming and an outgoing line and the connecting segment between them.

    Lines are ``p1 + t v1`` and ``p2 + t v2``.  The PoCA is the midpoint of the shortest segment
    q1 -> q2.  Nearly parallel lines (``|v1 x v2|^2 <= parallel_tol |v1|^2 |v2|^2``) make it
    ill-conditioned; there both lines are evaluated at height ``fallback_z`` instead.

    Args:
        p1, v1, p2, v2 (Tensor): (N, 3) points and directions (direction z-components non-zero).
        fallback_z (float): height used for nearly parallel lines.
    Returns:
        tuple: ``poca`` (N, 3), ``gap`` (N, 3) = q2 - q1, ``parallel`` (N,) bool.
    """
    w0 = p1 - p2
    a = (v1 * v1).sum(1)
    b = (v1 * v2).sum(1)
    c = (v2 * v2).sum(1)
    d = (v1 * w0).sum(1)
    e = (v2 * w0).sum(1)
    denom = a * c - b * b
    parallel = denom <= parallel_tol * a * c
    safe = torch.where(parallel, torch.ones_like(denom), denom)
    t1 = torch.where(parallel, (fallback_z - p1[:, 2]) / v1[:, 2], (b * e - c * d) / safe)
    t2 = torch.where(parallel, (fallback_z - p2[:, 2]) / v2[:, 2], (a * e - b * d) / safe)
    q1 = p1 + t1.unsqueeze(1) * v1
    q2 = p2 + t2.unsqueeze(1) * v2
    return (q1 + q2) / 2, q2 - q1, parallel
