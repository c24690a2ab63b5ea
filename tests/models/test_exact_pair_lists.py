"""Pair lists straight from the exact kernel maps (``ConvPlan.exact_kernel_maps`` ->
``pair_lists_from_exact``, ``layers.pair_conv.pairs_from_exact``), the deploy pre-ops' path: the same lists,
pair counts and drops as the neighbour-map path (``build_rulebooks`` -> ``build_pair_lists``), on unsorted voxels,
with pair bounds that hold and with too few pairs (truncated and counted, or raised)."""
import pytest
import torch

from fsdlite.models.lidar import SparseUNet
from fsdlite.models.layers.pair_conv import pair_capacity, pairs_from_exact, pairs_from_nbr
from fsdlite.ops import KernelMap, subm_offset_pairs
from fsdlite.structures.bounds import BoundExceededError


def unet_and_voxels(seed, count):
    """A three-level SparseUNet and ``count`` unique voxels of two samples in random (unsorted) order."""
    unet = SparseUNet(5, (1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 24.0, 24.0, 8.0), base_channels=4,
                      encoder_channels=((4,), (8, 8), (8,)), decoder_channels=((8, 8, 8), (8, 8, 4), (4, 4, 6))).eval()
    g = torch.Generator().manual_seed(seed)
    keys = torch.randperm(2 * 8 * 24 * 24, generator=g)[:count]
    b, rest = keys // (8 * 24 * 24), keys % (8 * 24 * 24)
    return unet, torch.stack([b, rest // 576, (rest // 24) % 24, rest % 24], 1)


@pytest.mark.parametrize('seed, count', [(0, 600), (1, 1200)])
def test_exact_pair_lists_equal_the_map_built_ones(seed, count):
    unet, coors = unet_and_voxels(seed, count)
    plan = unet.conv_plan()
    convs, level_coors = plan.exact_kernel_maps(coors)
    levels = [count + 17] + [c.shape[0] + 5 for c in level_coors[1:]]  # every level fits, with padding rows
    padded = torch.cat([coors, torch.zeros(17, 4, dtype=torch.long)])
    nbrs, counts, dropped = plan.build_rulebooks(padded, count, levels, inverse_maps=False)
    assert [int(c) for c in counts] == [c.shape[0] for c in level_coors] and int(sum(dropped)) == 0
    # convs sharing a key (the submanifold convs of a level) share one map, as on the SparseTensor
    shared = {}
    for nbr, kmap, g in zip(nbrs, convs, plan.geometries):
        if g.kind == 'subm':
            assert shared.setdefault(id(kmap), nbr) is nbr
    assert len(shared) < sum(g.kind == 'subm' for g in plan.geometries)
    with_inverse, _, _ = plan.build_rulebooks(padded, count, levels)
    kinds = [g.kind for g in plan.geometries]
    for i in (i for i, k in enumerate(kinds) if k == 'inverse'):  # the strided map of its key, transposed
        j = next(j for j, g in enumerate(plan.geometries) if g.kind == 'conv'
                 and g.indice_key == plan.geometries[i].indice_key)
        assert with_inverse[i].shape[0] == levels[plan.levels[j] - 1]
        pairs = int((nbrs[j] < levels[plan.levels[j] - 1]).sum())
        assert int((with_inverse[i] < levels[plan.levels[j]]).sum()) == pairs
    needed = plan.count_pairs(nbrs, levels)
    assert torch.equal(plan.exact_pair_counts(convs), needed) and int(needed.min()) > 0
    # the pre-ops leave the inverse convs' maps out: the same maps otherwise, the same counts and lists
    lean, lean_levels = plan.exact_kernel_maps(coors, inverse_maps=False)
    assert [m is None for m in lean] == [k == 'inverse' for k in kinds]
    assert all(torch.equal(a.pairs, b.pairs) for a, b in zip(lean, convs) if a is not None)
    assert all(torch.equal(a, b) for a, b in zip(lean_levels, level_coors))
    assert torch.equal(plan.exact_pair_counts(lean), needed)
    short = [1] * len(needed)  # the pairs beyond each slot's capacity are lost, highest offsets first
    for max_pairs in (needed.tolist(), (needed + 300).tolist(), short):
        by_maps, drop_maps = plan.build_pair_lists(nbrs, levels, max_pairs, strict=False)
        exact, drop_exact = plan.pair_lists_from_exact(convs, levels, max_pairs, strict=False)
        assert torch.equal(drop_exact, drop_maps) and len(exact) == len(by_maps)
        assert all(torch.equal(a, b) for a, b in zip(exact, by_maps))
        lean_lists, _ = plan.pair_lists_from_exact(lean, levels, max_pairs, strict=False)
        assert all(torch.equal(a, b) for a, b in zip(lean_lists, by_maps))
    assert int(drop_exact.sum()) > 0
    with pytest.raises(BoundExceededError, match=r'max_pairs\[0\]'):  # strict: the first slot over its bound
        plan.pair_lists_from_exact(convs, levels, short, strict=True)
    with pytest.raises(ValueError, match='max_pairs needs 5 entries'):
        plan.pair_lists_from_exact(convs, levels, [100])


def test_exact_kernel_maps_keep_the_input_row_order_of_level_zero():
    unet, coors = unet_and_voxels(3, 500)
    plan = unet.conv_plan()
    maps, levels = plan.exact_kernel_maps(coors)
    assert torch.equal(levels[0], coors)
    assert plan.geometries[0].kind == 'subm' and plan.levels[0] == 0
    reference = subm_offset_pairs(coors, unet.sparse_shape, 3)
    assert torch.equal(maps[0].pairs, reference.pairs) and torch.equal(maps[0].offset_starts, reference.offset_starts)
    assert (maps[0].num_in, maps[0].num_out) == (500, 500) and maps[0].layout == 'exact'
    kinds = [g.kind for g in plan.geometries]
    inverse = [i for i, k in enumerate(kinds) if k == 'inverse']
    assert inverse
    for i in inverse:  # the strided conv of the same level, its pairs swapped (re-sorted where the rows are)
        j = next(j for j, (k, s) in enumerate(zip(kinds, plan.levels)) if k == 'conv' and s == plan.levels[i])
        swapped = maps[j].transposed()
        assert torch.equal(maps[i].pairs, swapped.pairs) and torch.equal(maps[i].offset_starts, maps[j].offset_starts)
        assert (maps[i].num_in, maps[i].num_out) == (maps[j].num_out, maps[j].num_in)


def test_pairs_from_exact_of_no_pairs_and_bad_shapes():
    starts = torch.zeros(28, dtype=torch.long)
    empty = pairs_from_exact(KernelMap.exact(torch.zeros(2, 0, dtype=torch.long), starts, 5, 7), 5, 7, 10)
    by_map = pairs_from_nbr(torch.full((7, 27), 5), 5, 10)
    assert torch.equal(empty.pairs, by_map.pairs) and int(empty.num_pairs) == int(empty.num_dropped) == 0
    assert empty.pairs.shape == (3, pair_capacity(10, 27))
    expected = r'expected int64 pairs \(2, P\) and offset_starts \(K \+ 1,\)'
    with pytest.raises(ValueError, match=expected + r'.*got torch.int64 \(3, 4\)'):
        pairs_from_exact(KernelMap.exact(torch.zeros(3, 4, dtype=torch.long), starts, 5, 5), 5, 5, 10)
    with pytest.raises(ValueError, match=expected + r'.*torch.int64 \(1,\)'):
        pairs_from_exact(KernelMap.exact(torch.zeros(2, 4, dtype=torch.long), torch.zeros(1, dtype=torch.long), 5, 5), 5,
                         5, 10)
    with pytest.raises(ValueError, match=expected + r'.*got torch.float32 \(2, 4\)'):
        pairs_from_exact(KernelMap.exact(torch.zeros(2, 4), starts, 5, 5), 5, 5, 10)
    with pytest.raises(ValueError, match='kernel_map must be exact, got a dense map'):
        pairs_from_exact(KernelMap.dense(torch.zeros(5, 27, dtype=torch.long), 5), 5, 5, 10)


def test_exact_pair_lists_of_no_voxels_hold_only_dumps():
    unet, _ = unet_and_voxels(0, 1)
    plan = unet.conv_plan()
    convs, levels = plan.exact_kernel_maps(torch.zeros(0, 4, dtype=torch.long))
    assert [c.shape[0] for c in levels] == [0, 0, 0] and int(plan.exact_pair_counts(convs).sum()) == 0
    bounds = [6, 4, 2]
    lists, dropped = plan.pair_lists_from_exact(convs, bounds, [10] * 5)
    for pairs, (_, _, num_in, num_out) in zip(lists, plan.rulebook_layout(bounds)):
        assert (pairs[0] == num_in).all() and (pairs[1] == num_out).all()
    assert int(dropped.sum()) == 0
