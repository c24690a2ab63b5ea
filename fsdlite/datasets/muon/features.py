"""Model inputs and the physics baseline built from reconstructed muons."""
import torch

FEATURE_NAMES = ('dtheta_x', 'dtheta_y', 'dx', 'dy', 'x0_estimate', 'dpoca_x', 'dpoca_y', 'dpoca_z', 'dpoca_r')


def voxel_muon_features(muons, centres, nearest=None):
    """The (V, M, 9) VoxelNet input: every voxel sees every muon, PoCA relative to the voxel.

    Columns (``FEATURE_NAMES``): dtheta_x, dtheta_y (rad), dx, dy (m, displacement at the PoCA),
    the per-muon X0 estimate (m), PoCA - voxel centre (3, m) and its norm.

    Args:
        muons (dict): ``dtheta`` (M, 2), ``dxy`` (M, 2), ``x0_estimate`` (M,), ``poca`` (M, 3).
        centres (Tensor): (V, 3) voxel centres.
        nearest (int, optional): K; each voxel sees only the K muons whose PoCA is nearest to its centre
            (ordered by that distance) instead of all M.
    Returns:
        Tensor: (V, M, 9) float32, or (V, K, 9) with ``nearest``.
    """
    per_muon = torch.cat([muons['dtheta'], muons['dxy'], muons['x0_estimate'].unsqueeze(1)], 1).float()
    offset = (muons['poca'].unsqueeze(0) - centres.unsqueeze(1)).float()           # (V, M, 3)
    v, m = offset.shape[:2]
    feats = torch.cat([per_muon.unsqueeze(0).expand(v, m, 5), offset, offset.norm(dim=2, keepdim=True)], 2)
    if nearest is None:
        return feats
    if not 1 <= int(nearest) <= m:
        raise ValueError(f'voxel_muon_features: nearest must be in [1, M={m}] muons, got {nearest}')
    order = feats[..., 8].topk(int(nearest), dim=1, largest=False).indices              # (V, K) ascending
    return feats.gather(1, order.unsqueeze(2).expand(-1, -1, feats.shape[2]))


def poca_log_scatter(muons, grid, min_angle=1e-6):
    """Physics baseline: per-voxel mean of log(scattering angle) of the muons whose PoCA is in the voxel.

    The angle is the space angle sqrt(dtheta_x^2 + dtheta_y^2), clamped at ``min_angle``.

    Args:
        muons (dict): ``poca`` (M, 3), ``dtheta`` (M, 2).
        grid (VoxelGrid): geometry.
    Returns:
        tuple: ``score`` (V,) float32, NaN for voxels without any PoCA (the metric documents how it fills
        them), and ``count`` (V,) int64 PoCAs per voxel.
    """
    voxel, inside = grid.locate(muons['poca'])
    voxel = voxel[inside]
    log_angle = muons['dtheta'][inside].norm(dim=1).clamp(min=min_angle).log()
    count = torch.bincount(voxel, minlength=grid.num_voxels)
    total = torch.zeros(grid.num_voxels, dtype=log_angle.dtype).index_add_(0, voxel, log_angle)
    score = torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, float('nan')))
    return score.float(), count
