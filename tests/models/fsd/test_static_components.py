"""Fixed-shape building blocks of FSD-lite / FSDv2-lite against their dynamic twins: padded index compaction vs nonzero, min-label propagation and padded grouping vs
ClusterAssigner (fsdlite.ops.connected_components), padded foreground sampling vs ForegroundSampler, padded
VFE / neck / SIR / box selection vs the dynamic modules, rulebook UNet vs spconv; bounds raise or truncate."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite import ops
from fsdlite.models.fsd.fsdv2_lite import valid_first
from fsdlite.models.fsd.fg_sampler import ForegroundSampler
from fsdlite.models.fsd.indexing import mask_to_index, mask_to_padded_index
from fsdlite.models.fsd.cluster_assigner import connected_labels
from fsdlite.models.layers.execution import fixed_shapes
from fsdlite.registry import MODELS, TASK_UTILS
from fsdlite.structures.bounds import BoundExceededError

RANGE = (0.0, -10.0, -3.0, 20.0, 10.0, 1.0)


def random_voxels(seed, batch, shape, density, pad):
    g = torch.Generator().manual_seed(seed)
    coors = torch.nonzero(torch.rand(batch, *shape, generator=g) < density)
    coors = coors[torch.randperm(coors.shape[0], generator=g)]
    return torch.cat([coors, torch.zeros(pad, 4, dtype=torch.long)]), coors.shape[0]


@pytest.fixture(scope='module')
def unet(kit):
    torch.manual_seed(0)
    net = MODELS.build(dict(type='SparseUNet', in_channels=5, voxel_size=(0.5, 0.5, 0.5),
                            point_range=(0, 0, 0, 4, 6, 3), base_channels=8, encoder_channels=((8,), (16,), (16,)),
                            decoder_channels=((16, 16, 16), (16, 16, 8), (8, 8, 8))))
    return kit.randomize_bn(net).eval().double()


@pytest.mark.parametrize('graph_ops', [False, True])
def test_rulebook_unet_equals_spconv(unet, graph_ops):
    coors, n = random_voxels(3, 2, tuple(unet.sparse_shape), 0.15, 7)
    feats = torch.randn(coors.shape[0], 5, dtype=torch.float64)
    feats[n:] = 1e6  # padding rows never leak into valid outputs
    with torch.no_grad():
        ref = unet(feats[:n], coors[:n], 2)
        plan, levels = unet.conv_plan(), [coors.shape[0], 400, 400]
        nbrs, nums, dropped = plan.build_rulebooks(coors, n, levels, ops=ops.GraphRulebookOps(2) if graph_ops else None)
        out = unet(feats, kernel_maps=plan.dense_kernel_maps(nbrs, levels))
    torch.testing.assert_close(out[:n], ref, rtol=1e-10, atol=1e-10)
    assert int(nums[0]) == n and all(int(d) == 0 for d in dropped) and int(nums[2]) > 0


def test_rulebook_unet_bounds_and_arguments(unet):
    coors, n = random_voxels(4, 1, tuple(unet.sparse_shape), 0.3, 0)
    plan = unet.conv_plan()
    needed = int(plan.build_rulebooks(coors, n, [n, 10 ** 4, 10 ** 4])[1][1])
    with pytest.raises(BoundExceededError) as err:
        plan.build_rulebooks(coors, n, [n, needed - 1, 10 ** 4], bound_name='max_mixer')
    assert (err.value.name, err.value.needed, err.value.allowed) == ('max_mixer[1]', needed, needed - 1)
    with pytest.raises(ValueError, match='one bound per UNet level'):
        plan.build_rulebooks(coors, n, [n, 100])
    with pytest.raises(ValueError, match='kernel maps'):
        unet(torch.zeros(n, 5, dtype=torch.float64), kernel_maps=[])


# ------------------------------------------------------------------------------------------- index compaction
@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), max_size=30), st.integers(1, 12))
def test_mask_to_padded_index_matches_nonzero(bits, bound):
    mask = torch.tensor(bits, dtype=torch.bool)
    index, num, dropped = mask_to_padded_index(mask, bound)
    ref = mask_to_index(mask)
    assert index.shape == (bound,) and int(num) == min(len(ref), bound)
    assert torch.equal(index[:int(num)], ref[:bound]) and bool((index[int(num):] == len(bits)).all())
    assert int(dropped) == max(len(ref) - bound, 0)
    if len(ref) > bound:
        with pytest.raises(BoundExceededError, match=f'needed {len(ref)}, allowed {bound}'):
            mask_to_padded_index(mask, bound, name='max_x')


def test_valid_first_is_the_dynamic_order_then_padding():
    order = valid_first(torch.tensor(2), torch.tensor(1), 4, 3).tolist()
    # a = [a0 a1 pa pa], b = [b0 pb pb] -> a0 a1 b0, then a's padding, then b's padding
    assert order == [0, 1, 4, 2, 3, 5, 6]


# ---------------------------------------------------------------------------- label propagation and grouping
def _partition(ids, dump):
    groups = {}
    for i, c in enumerate(ids.tolist()):
        if c != dump:
            groups.setdefault(c, []).append(i)
    return sorted(groups.values())


def test_connected_labels_chain_needs_iterations_and_reports():
    n = 40  # a path 0-1-...-39 labelled from the far end: the minimum must travel
    nbr = torch.full((n, 2), n)
    nbr[1:, 0] = torch.arange(n - 1)
    nbr[:-1, 1] = torch.arange(1, n)
    start = torch.arange(n)
    label, needed, unconverged = connected_labels(start, nbr, None)
    assert bool((label == 0).all()) and needed >= 1 and int(unconverged) == 0
    with pytest.raises(BoundExceededError) as err:
        connected_labels(start, nbr, needed - 1)
    assert (err.value.name, err.value.needed, err.value.allowed) == ('max_cc_iters', needed, needed - 1)
    partial, _, unconverged = connected_labels(start, nbr, needed - 1, strict=False)
    assert int(unconverged) > 0 and not bool((partial == 0).all())


def _assigner(min_points=2, tall=True):
    # tall cells: one z layer (the configs' choice); cubic cells: the link window spans every z layer
    sizes = ((0.3, 0.3, 6.0), (0.1, 0.1, 6.0)) if tall else (0.3, 0.1)
    return TASK_UTILS.build(dict(type='ClusterAssigner', num_classes=2, cluster_voxel_size=sizes,
                                 connected_dist=(0.6, 0.15), min_points=min_points, point_range=(2, -3, -3, 9, 3, 1)))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.integers(0, 150), pad=st.integers(0, 6), min_points=st.integers(1, 2),
       spread=st.sampled_from([0.5, 3.0]), tall=st.booleans())
def test_bounded_grouping_equals_the_exact_one(seed, n, pad, min_points, spread, tall):
    g = torch.Generator().manual_seed(seed)
    scale, low = torch.tensor([spread, spread, 1.0]), torch.tensor([5.0, 0.0, -2.5])
    centre = (torch.rand(n, 3, generator=g) * scale + low).double()
    if n >= 10:
        centre[5:10] = centre[:5].clone()  # duplicated centres
    cls = torch.randint(0, 2, (n,), generator=g)
    batch = torch.randint(0, 2, (n,), generator=g)
    assigner = _assigner(min_points, tall)
    ref = assigner(centre, cls, batch, 2)
    pad_rows = lambda x: torch.cat([x, x.new_zeros((pad,) + tuple(x.shape[1:]))])  # noqa: E731
    k = n + pad + 1
    out = assigner(pad_rows(centre), pad_rows(cls), pad_rows(batch), 2, num_valid=n, bounds=(k, 50))
    assert out.capacity == k and out.cc_iters is not None and ref.cc_iters is None
    cluster = out.point_cluster[:n]
    assert torch.equal(torch.where(cluster == k, ref.capacity, cluster), ref.point_cluster)  # same ids and numbering
    assert int(out.num_clusters) == ref.num_clusters and int(out.num_near_empty) == int(ref.num_near_empty)
    assert torch.equal(out.cluster_class[:ref.num_clusters], ref.cluster_class)
    assert torch.equal(out.cluster_batch[:ref.num_clusters], ref.cluster_batch)
    assert bool((out.point_cluster[n:] == k).all()) and out.dropped.tolist() == [0, 0] == ref.dropped.tolist()
    if ref.num_clusters > 1:
        with pytest.raises(BoundExceededError, match=f'max_clusters exceeded: needed {ref.num_clusters}'):
            assigner(centre, cls, batch, 2, num_valid=n, bounds=(ref.num_clusters - 1, 50))
        out = assigner(centre, cls, batch, 2, num_valid=n, bounds=(ref.num_clusters - 1, 50), strict=False)
        assert out.dropped.tolist() == [1, 0] and int(out.num_clusters) == ref.num_clusters - 1


# ------------------------------------------------------------------------------------- foreground sampling
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10 ** 6), n=st.integers(0, 60), budget=st.integers(1, 8), bound=st.integers(1, 10),
       levels=st.sampled_from([None, 4]))
def test_fixed_shape_sampler_equals_the_dynamic_one(seed, n, budget, bound, levels):
    g = torch.Generator().manual_seed(seed)
    sampler = ForegroundSampler(3, score_thresholds=(0.3, 0.5, 0.2), max_per_class=(budget, 5, 3), point_range=RANGE)
    scores = torch.rand(n, 3, generator=g, dtype=torch.float64)
    if levels:  # quantized scores: many ties, resolved identically below the budget
        scores = torch.round(scores * levels) / levels
    votes = torch.randn(n, 3, 3, generator=g, dtype=torch.float64)
    xyz = torch.rand(n, 3, generator=g, dtype=torch.float64) * 10
    batch = torch.sort(torch.randint(0, 2, (n,), generator=g)).values
    ref = sampler(scores, votes, xyz, batch, 2)
    pad = 4
    padded = [torch.cat([t, t.new_zeros((pad,) + tuple(t.shape[1:]))]) for t in (scores, votes, xyz, batch)]
    valid = torch.arange(n + pad) < n
    per = torch.bincount(ref.batch * 3 + ref.class_id, minlength=6).view(2, 3).max(0).values
    bounds = [bound, 5, 3]
    if any(int(per[c]) > bounds[c] for c in range(3)):
        with pytest.raises(BoundExceededError, match='max_fg_points'):
            sampler(*padded, 2, valid=valid, bounds=bounds)
        return
    out = sampler(*padded, 2, valid=valid, bounds=bounds)
    m = int(out.num_valid)
    if levels is None or min(budget, 5, 3) >= n:  # no tie can straddle a class budget (top-k order of ties
        # at a budget is unspecified in the padded path)
        assert m == ref.point_index.numel()
        assert torch.equal(out.point_index[:m], ref.point_index) and torch.equal(out.class_id[:m], ref.class_id)
        assert torch.equal(out.batch[:m], ref.batch)
        torch.testing.assert_close(out.centre[:m], ref.centre)
        torch.testing.assert_close(out.score[:m], ref.score)
    assert int(out.num_over_budget) == int(ref.num_over_budget)
    assert bool((out.point_index[m:] == n + pad).all()) and out.dropped.tolist() == [0, 0, 0]


# ------------------------------------------------------------------------------- padded modules vs dynamic
def test_padded_vfe_neck_sir_and_box_selection_equal_dynamic(kit):
    torch.manual_seed(0)
    vfe = kit.randomize_bn(MODELS.build(dict(type='DynamicVFE', in_channels=4, feat_channels=(8, 8),
                                         voxel_size=(0.5, 0.5, 0.5), point_range=RANGE))).eval().double()
    neck = MODELS.build(dict(type='Voxel2PointNeck', in_channels=8, voxel_size=(0.5, 0.5, 0.5), point_range=RANGE))
    sir = MODELS.build(dict(type='SIR', in_channels=8, block_channels=((8, 8), (8,)), rel_channels=(4,))).double()
    head = MODELS.build(dict(type='ClusterHead', in_channels=sir.out_channels, num_classes=3, shared_channels=(16,),
                             class_given=False, test_cfg=dict(score_thr=0.45))).double()
    torch.nn.init.zeros_(head.cls.bias)  # scores around 0.5: some above the threshold, some below
    g = torch.Generator().manual_seed(1)
    points = torch.rand(200, 4, generator=g, dtype=torch.float64) * torch.tensor([19.0, 19.0, 3.5, 1.0]) + \
        torch.tensor([0.0, -9.5, -2.9, 0.0])
    vox = ops.voxelize(points, (0.5, 0.5, 0.5), RANGE)
    v, pad = vox.voxel_coors.shape[0], 5
    coors = torch.cat([vox.voxel_coors, torch.zeros(pad, 4, dtype=torch.long)])
    p2v = torch.cat([vox.point2voxel, torch.full((pad,), v + pad)])
    padded_points = torch.cat([points, torch.full((pad, 4), 7.0, dtype=torch.float64)])
    with torch.no_grad():
        ref_v, ref_p = vfe(points, vox.point2voxel, vox.voxel_coors)
        with fixed_shapes():  # the fixed execution mode: index V (= rows of coors) is the dump slot
            out_v, out_p = vfe(padded_points, p2v, coors)
            out_n = neck(out_v, padded_points, p2v, coors)
        torch.testing.assert_close(out_v[:v], ref_v)
        torch.testing.assert_close(out_p[:200], ref_p)
        torch.testing.assert_close(out_n[:200], neck(ref_v, points, vox.point2voxel, vox.voxel_coors))
        cluster = torch.randint(0, 12, (200,), generator=g)
        cluster[cluster == 5] = 6  # an empty cluster (zero features in both modes)
        cxyz = torch.rand(12, 3, generator=g, dtype=torch.float64)
        ref_c, _ = sir(ref_p, points[:, :3], cluster, 12, cxyz)
        with fixed_shapes():
            out_c, _ = sir(out_p, padded_points[:, :3], torch.cat([cluster, torch.full((pad,), 12)]), 12, cxyz)
        torch.testing.assert_close(out_c, ref_c)
        logits, codes = head(ref_c)
        batch = torch.arange(12) % 2
        boxes, scores, labels = head.decode(logits, codes, cxyz)
        keep = mask_to_index(scores > 0.45)
        valid = torch.ones(12, dtype=torch.bool)
        sel = head.select(logits, codes, cxyz, batch, None, valid=valid, max_boxes=12)
        order = torch.argsort(scores[keep], descending=True)
        n = int(sel['num_boxes'])
        assert n == keep.numel() > 0 and int(sel['dropped']) == 0
        torch.testing.assert_close(sel['boxes'][:n], boxes[keep][order])
        assert torch.equal(sel['labels'][:n], labels[keep][order]) and torch.equal(sel['batch'][:n], batch[keep][order])
        assert bool((sel['scores'][n:] == 0).all())
        dynamic = head.select(logits, codes, cxyz, batch)  # the same boxes, compacted in instance order
        torch.testing.assert_close(dynamic['boxes'], boxes[keep])
        assert torch.equal(dynamic['batch'], batch[keep]) and 'num_boxes' not in dynamic
        if n > 1:
            with pytest.raises(BoundExceededError, match=f'max_boxes exceeded: needed {n}, allowed {n - 1}'):
                head.select(logits, codes, cxyz, batch, None, valid=valid, max_boxes=n - 1)
            part = head.select(logits, codes, cxyz, batch, None, valid=valid, max_boxes=n - 1, strict=False)
            assert int(part['dropped']) == 1 and int(part['num_boxes']) == n - 1
