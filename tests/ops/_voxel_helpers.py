"""Voxel sets shared by the rulebook and sparse_conv tests: the Waymo voxelization of
traveller59/spconv@263d6b4:test/data/test_spconv.pkl (whole or a bird's-eye-view crop), random padded voxels and a
sort key."""
import pickle

import torch


def waymo_voxels(shared_data, crop=None):
    """((V, 4) int64 [b, z, y, x], [nz, ny, nx]): the Waymo voxels, or those of the ``crop`` x ``crop`` (y, x) window
    at (600, 700) shifted to the origin."""
    _, coors, shape = pickle.load(open(shared_data / 'spconv_waymo' / 'test_spconv.pkl', 'rb'))
    coors = torch.from_numpy(coors).long()
    if crop:
        keep = (coors[:, 2] >= 600) & (coors[:, 2] < 600 + crop) & (coors[:, 3] >= 700) & (coors[:, 3] < 700 + crop)
        coors = coors[keep]
        coors[:, 2:] -= torch.tensor([600, 700])
        shape = [shape[0], crop, crop]
    return coors, list(shape)


def voxel_key(coors):
    """(V,) int64 key that sorts [b, z, y, x] rows lexicographically (coordinates < 4096)."""
    return ((coors[:, 0] * 4096 + coors[:, 1]) * 4096 + coors[:, 2]) * 4096 + coors[:, 3]


def random_voxels(shape=(6, 7, 9), batches=2, density=0.3, pad=5, seed=0):
    """Padded (Vmax, 4) coordinates in random row order; padding rows hold garbage (even duplicates)."""
    g = torch.Generator().manual_seed(seed)
    coors = torch.nonzero(torch.rand(batches, *shape, generator=g) < density)
    coors = coors[torch.randperm(coors.shape[0], generator=g)]
    garbage = torch.zeros(pad, 4, dtype=torch.long)
    if pad and coors.shape[0]:
        garbage[0] = coors[0]  # a duplicate of a voxel
    garbage[1:, 1] = 10 ** 6  # out of range: padding is never validated nor read
    return torch.cat([coors, garbage]), coors.shape[0]
