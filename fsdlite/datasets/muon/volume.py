"""Voxelised passive volumes: the grid geometry and random-block material layouts.

Voxel order is x-major, then y, then z: ``v = (ix * ny + iy) * nz + iz``.  The passive volume
spans ``[0, nx*s] x [0, ny*s] x [0, nz*s]`` metres (z up); muons enter at the top face.
"""
import torch


class VoxelGrid:
    """Regular grid of cubic voxels.

    Args:
        shape (tuple[int, int, int]): (nx, ny, nz) voxels.
        voxel_size (float): edge length in metres.
    """

    def __init__(self, shape, voxel_size):
        shape = tuple(int(s) for s in shape)
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f'VoxelGrid: shape must be three positive ints (nx, ny, nz), got {shape}')
        if not voxel_size > 0:
            raise ValueError(f'VoxelGrid: voxel_size must be > 0 metres, got {voxel_size}')
        self.shape = shape
        self.voxel_size = float(voxel_size)

    @property
    def num_voxels(self):
        """V = nx * ny * nz."""
        return self.shape[0] * self.shape[1] * self.shape[2]

    @property
    def extent(self):
        """(3,) float64 size of the volume in metres."""
        return torch.tensor(self.shape, dtype=torch.float64) * self.voxel_size

    @property
    def height(self):
        """Height of the passive volume in metres."""
        return self.shape[2] * self.voxel_size

    def coords(self):
        """(V, 3) int64 voxel coordinates (ix, iy, iz) in voxel order."""
        nx, ny, nz = self.shape
        grid = torch.meshgrid(torch.arange(nx), torch.arange(ny), torch.arange(nz), indexing='ij')
        return torch.stack(grid, -1).reshape(-1, 3)

    def centres(self):
        """(V, 3) float64 voxel centres in metres."""
        return (self.coords().double() + 0.5) * self.voxel_size

    def locate(self, xyz):
        """Voxel index of each point and whether the point lies inside the volume.

        Args:
            xyz (Tensor): (N, 3) positions in metres.
        Returns:
            tuple: ``voxel`` (N,) int64 (clamped into the grid for outside points) and ``inside`` (N,) bool
            (faces inclusive).
        """
        size = torch.tensor(self.shape, dtype=torch.long, device=xyz.device)
        cell = torch.floor(xyz / self.voxel_size).long()
        inside = ((xyz >= 0) & (xyz <= self.extent.to(xyz))).all(1)
        cell = torch.minimum(cell.clamp(min=0), size - 1)
        voxel = (cell[:, 0] * self.shape[1] + cell[:, 1]) * self.shape[2] + cell[:, 2]
        return voxel, inside


def random_block_volume(grid, num_classes, generator, block_size=(1, None)):
    """A background material with one box-shaped block of another material.

    Background and block classes are drawn uniformly (distinct); the block's edge lengths (voxels)
    are drawn per axis from ``[block_size[0], block_size[1]]`` (``None``: the grid size minus one,
    so some background always remains) and its position uniformly inside the grid.

    Args:
        grid (VoxelGrid): the geometry.
        num_classes (int): number of material classes (>= 2).
        generator (torch.Generator): random source.
        block_size (tuple): (min, max) block edge in voxels.
    Returns:
        tuple: ``labels`` (V,) int64 class per voxel and ``block`` (V,) bool block membership.
    """
    if num_classes < 2:
        raise ValueError(f'random_block_volume: num_classes must be >= 2, got {num_classes}')
    background = int(torch.randint(num_classes, (1,), generator=generator))
    block_class = int(torch.randint(num_classes - 1, (1,), generator=generator))
    block_class += block_class >= background
    lo = []
    hi = []
    for n in grid.shape:
        smallest = max(1, min(int(block_size[0]), n))
        largest = min(n, int(block_size[1])) if block_size[1] is not None else max(1, n - 1)
        largest = max(smallest, largest)
        edge = int(torch.randint(smallest, largest + 1, (1,), generator=generator))
        start = int(torch.randint(0, n - edge + 1, (1,), generator=generator))
        lo.append(start)
        hi.append(start + edge)
    coords = grid.coords()
    block = ((coords >= torch.tensor(lo)) & (coords < torch.tensor(hi))).all(1)
    labels = torch.where(block, block_class, background).long()
    return labels, block
