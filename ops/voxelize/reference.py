"""Pure-torch reference of voxelize (dynamic voxelization), for tests and benchmarks."""
import torch

from ._grid import check_geometry, grid_shape


def voxelize_reference(points, voxel_size, point_range, batch=None):
    """Same contract as :func:`fsdlite.ops.voxelize` (returns the same 6 tensors, as a tuple).

    Coordinates are ``floor((p - min) / size)`` in the points' dtype; a point is inside iff
    ``0 <= coordinate < grid`` on all axes; voxels are ordered by their first point (torch.unique +
    scatter of the first index).
    """
    size, lower, _ = check_geometry(voxel_size, point_range)
    nz, ny, nx = grid_shape(voxel_size, point_range)
    n, device, dtype = points.shape[0], points.device, points.dtype
    long = dict(dtype=torch.long, device=device)
    xyz = points[:, :3]
    q = torch.floor((xyz - torch.tensor(lower, dtype=dtype, device=device)) /
                    torch.tensor(size, dtype=dtype, device=device))
    finite = torch.isfinite(xyz).all(1)
    inside = finite & ((q >= 0) & (q < torch.tensor([nx, ny, nz], dtype=dtype, device=device))).all(1)
    c = torch.where(inside[:, None], q, torch.zeros_like(q)).long()
    b = batch.long() if batch is not None else torch.zeros(n, **long)
    coors = torch.stack([b, c[:, 2], c[:, 1], c[:, 0]], 1)
    key = ((b * nz + c[:, 2]) * ny + c[:, 1]) * nx + c[:, 0]
    rows = torch.nonzero(inside).view(-1)
    _, inverse, counts = torch.unique(key[rows], return_inverse=True, return_counts=True)
    first = torch.full((counts.numel(),), n, **long).scatter_reduce(0, inverse, rows, 'amin')
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), **long)
    point2voxel = torch.full((n,), -1, **long)
    point2voxel[rows] = rank[inverse]
    point_coors = torch.full((n, 4), -1, **long)
    point_coors[rows] = coors[rows]
    return (coors[first[order]], point2voxel, counts[order], point_coors,
            (finite & ~inside).sum(), (~finite).sum())
