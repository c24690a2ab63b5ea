"""rulebook ops (C++; rulebook_pairs on the submanifold map) vs the pure-torch reference and spconv's own
indice-pair generation (Native, CPU); the offset-grouped pairs of the fused sparse conv built directly
(subm_offset_pairs / conv_offset_pairs, on the voxels as stored and sorted by (b, z, y, x)) vs a neighbour map
followed by pairs_by_offset.

Voxels: the 125,562-voxel Waymo-range frame of ../shared/data/spconv_waymo (grid 80 x 1600 x 1600; spconv's
benchmark), or the ``V`` voxels of it nearest to the sensor in bird's-eye view; a synthetic voxel set of the
same grid when the data folder is absent. Peak memory per variant in a fresh subprocess.
"""
import pickle

import torch

from op_cases._point_clouds import SHARED
from op_cases._scaffold import case

SHAPE = (80, 1600, 1600)


def voxel_set(num_voxels=None, seed=0):
    """((V, 4) int64 [b, z, y, x], spatial shape): real Waymo voxels (the V nearest to the sensor in BEV).

    Falls back to a synthetic set (ground plane + random boxes) when the shared data is absent.
    """
    path = SHARED / 'spconv_waymo' / 'test_spconv.pkl'
    if path.is_file():
        with open(path, 'rb') as f:
            _, coors, shape = pickle.load(f)
        coors = torch.from_numpy(coors).long()
    else:
        g = torch.Generator().manual_seed(seed)
        yx = torch.randint(0, 1600, (400_000, 2), generator=g)
        z = (10 + torch.randn(400_000, generator=g).abs() * 8).long().clamp(max=79)
        coors = torch.unique(torch.cat([torch.zeros(400_000, 1, dtype=torch.long), z[:, None], yx], 1), dim=0)
        shape = SHAPE
    if num_voxels is not None and num_voxels < coors.shape[0]:
        centre = torch.tensor([800.0, 800.0])
        dist = (coors[:, 2:].float() - centre).norm(dim=1)
        coors = coors[torch.sort(torch.argsort(dist)[:num_voxels]).values]
    return coors, tuple(int(s) for s in shape)


def work(variant, op, num_voxels):
    """Zero-arg callable of ``op`` ('subm', 'conv', 'inverse') with ``variant`` ('fsdlite', 'reference', 'spconv')."""
    from fsdlite.ops import rulebook_conv, rulebook_inverse, rulebook_subm
    from fsdlite.ops.rulebook import reference as ref
    coors, shape = voxel_set(num_voxels)
    n = coors.shape[0]
    geometry = dict(kernel_size=[3] * 3, stride=[2] * 3, padding=[1] * 3, dilation=[1] * 3)
    if variant == 'spconv':
        from fsdlite.utils import compat
        compat.import_spconv()
        from spconv.core import ConvAlgo
        from spconv.pytorch import ops
        subm = op == 'subm'
        s, p = ([1] * 3, [1] * 3) if subm else (geometry['stride'], geometry['padding'])
        c32 = coors.int().contiguous()
        return lambda: ops.get_indice_pairs(c32, 1, list(shape), ConvAlgo.Native, [3] * 3, s, p, [1] * 3, [0] * 3,
                                            subm, False)
    if op == 'subm':
        if variant == 'fsdlite':
            return lambda: rulebook_subm(coors, n, shape, 3)
        return lambda: ref.rulebook_subm_reference(coors, n, shape, [3] * 3, [1] * 3)
    if op == 'conv':
        if variant == 'fsdlite':
            return lambda: rulebook_conv(coors, n, shape, max_out=n, **geometry)
        return lambda: ref.rulebook_conv_reference(coors, n, shape, *geometry.values(), n)
    if op == 'pairs':  # the submanifold map as a pair list (tiles of 128 rows, room for every pair)
        from fsdlite.ops import rulebook_pairs
        nbr = rulebook_subm(coors, n, shape, 3)
        capacity = -(-(int((nbr < n).sum()) + 27 * 127) // 128) * 128
        if variant == 'fsdlite':
            return lambda: rulebook_pairs(nbr, n, capacity, 128)
        return lambda: ref.rulebook_pairs_reference(nbr, n, capacity, 128)
    nbr = rulebook_conv(coors, n, shape, max_out=n, **geometry).nbr
    if variant == 'fsdlite':
        return lambda: rulebook_inverse(nbr, n)
    return lambda: ref.rulebook_inverse_reference(nbr, n)


def offset_pairs_work(variant, op, num_voxels):
    """Zero-arg callable building the sparse_conv pairs of ``op`` ('subm' or 'conv' k3 s2 p1) with ``variant``:
    'map + pairs_by_offset' (the padded rulebook op, then its entries), 'direct' (rows as stored) or 'direct,
    sorted rows'."""
    from fsdlite.ops import (conv_offset_pairs, pairs_by_offset, rulebook_conv, rulebook_subm, subm_offset_pairs,
                             voxel_keys)
    coors, shape = voxel_set(num_voxels)
    n = coors.shape[0]
    if variant == 'direct, sorted rows':
        coors = coors[torch.argsort(voxel_keys(coors, shape))]
    if variant != 'map + pairs_by_offset':
        if op == 'subm':
            return lambda: subm_offset_pairs(coors, shape, 3)
        return lambda: conv_offset_pairs(coors, shape, 3, 2, 1)
    if op == 'subm':
        return lambda: pairs_by_offset(rulebook_subm(coors, n, shape, 3), n)

    def conv():
        rb = rulebook_conv(coors, n, shape, 3, 2, 1, max_out=8 * n)
        return pairs_by_offset(rb.nbr[:int(rb.num_valid_out)], n)
    return conv


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): ``rulebook_subm`` / ``_conv`` / ``_inverse`` / ``_pairs`` on the
    whole voxel set (:func:`voxel_set`); ``quick``: its 5k voxels nearest the sensor."""
    num_voxels = 5_000 if quick else None
    size = f'V={num_voxels or 125_562}'
    return [case(f'rulebook_{op}', size + (' k3' if op in ('subm', 'pairs') else ' k3 s2 p1'), work, variants,
                 'reference', measure_memory=op not in ('inverse', 'pairs'), op=op, num_voxels=num_voxels)
            for op, variants in (('subm', ('reference', 'spconv', 'fsdlite')),
                                 ('conv', ('reference', 'spconv', 'fsdlite')), ('inverse', ('reference', 'fsdlite')),
                                 ('pairs', ('reference', 'fsdlite')))] + [
        case(f'{op}_offset_pairs', size + (' k3' if op == 'subm' else ' k3 s2 p1'), offset_pairs_work,
             ('map + pairs_by_offset', 'direct', 'direct, sorted rows'), 'map + pairs_by_offset', op=op,
             num_voxels=num_voxels) for op in ('subm', 'conv')]
