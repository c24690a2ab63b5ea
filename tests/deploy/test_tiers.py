"""Capacity tiers: smaller fixed-shape graphs for the pre-op bounds, the runtime picking the smallest that holds."""
import json

import pytest
import torch

from fsdlite.deploy import DeployedModel, export_model
from fsdlite.deploy.adapter import Frame, PreOpsResult
from fsdlite.deploy.fixed_shape import first_stage_rulebooks, fixed_inputs
from fsdlite.deploy import prepare
from fsdlite.deploy.tiers import Tier, check_tier_scales, run_on_tiers, select_tier
from fsdlite.deploy.verify import format_checks, verify_deploy
from fsdlite.structures.bounds import scale_bounds


@pytest.mark.parametrize('tiers, message', [((0,), r'in \(0, 1\).*got 0'), ((1.0,), 'got 1.0'),
                                            ((0.5, 1.5), 'got 1.5'), (('0.5',), "got '0.5'"), ((True,), 'got True'),
                                            ((0.5, 0.5), 'distinct')])
def test_bad_tier_scales_name_the_argument(tiers, message):
    with pytest.raises(ValueError, match='tiers: .*' + message):
        check_tier_scales(tiers)


def test_tier_scales_are_sorted_and_bounds_rounded_up():
    assert check_tier_scales([0.7, 0.4]) == [0.4, 0.7]
    assert check_tier_scales(()) == []
    bounds = dict(max_points=1001, max_voxels=[10, 3, 1], max_boxes=512)
    scaled = scale_bounds(bounds, 0.5, ('max_points', 'max_voxels', 'max_pairs'))
    assert scaled == dict(max_points=501, max_voxels=[5, 2, 1], max_boxes=512)  # absent max_pairs skipped
    assert bounds['max_points'] == 1001  # not modified in place
    assert scale_bounds(dict(a=10, b=[3]), 1.1) == dict(a=11, b=[4])  # 10 * 1.1 = 11.000000000000002 is 11


class SizedAdapter:
    """A tier adapter over inputs that are just a size: fits up to ``capacity``; records its pre-ops calls.  Without
    ``cheap_check`` it cannot judge a size before it is measured (``measure_needs`` wraps it in a tuple)."""

    def __init__(self, capacity, cheap_check=True):
        self.capacity, self.cheap_check, self.calls = capacity, cheap_check, 0

    def prepare_input(self, data):
        return data

    def may_fit(self, size):
        measured = isinstance(size, tuple)
        return not (self.cheap_check or measured) or self.size(size) <= self.capacity

    def measure_needs(self, size):
        return (self.size(size),)

    @staticmethod
    def size(size):
        return size[0] if isinstance(size, tuple) else size

    def pre_ops(self, size):
        self.calls += 1
        return PreOpsResult({}, None, dict(max_size=max(0, self.size(size) - self.capacity)))


def sized_tiers(*adapters):
    return [Tier(scale, {}, adapter, None) for scale, adapter in zip((0.25, 0.5, 1.0), adapters)]


def test_select_tier_takes_the_smallest_that_holds():
    tiers = sized_tiers(SizedAdapter(10), SizedAdapter(20), SizedAdapter(40))
    tier, pre = select_tier(tiers, 15)
    assert tier.scale == 0.5 and pre.dropped == dict(max_size=0)
    assert [t.adapter.calls for t in tiers] == [0, 1, 0]  # the 0.25 tier was ruled out without its pre-ops
    tier, pre = select_tier(tiers, 99)  # fits nothing: the full bounds, with the overflow counted
    assert tier.scale == 1.0 and pre.dropped == dict(max_size=59)


def test_select_tier_measures_the_needs_after_a_miss():
    """A bound only the pre-ops can measure (no cheap check) overflows: the needs are measured and the remaining
    tiers are judged exactly (no pre-ops for a tier that cannot hold the input)."""
    tiers = sized_tiers(SizedAdapter(10, cheap_check=False), SizedAdapter(20, cheap_check=False),
                        SizedAdapter(40, cheap_check=False))
    tier, _ = select_tier(tiers, 15)
    assert tier.scale == 0.5 and [t.adapter.calls for t in tiers] == [1, 1, 0]
    for t in tiers:
        t.adapter.calls = 0
    tier, pre = select_tier(tiers, 30)
    assert tier.scale == 1.0 and pre.dropped == dict(max_size=0) and [t.adapter.calls for t in tiers] == [1, 0, 1]
    with pytest.raises(ValueError, match='tiers must not be empty'):
        select_tier([], 1)


class GraphSizedAdapter(SizedAdapter):
    """Also an in-graph bound the tiers scale: the tier's graph drops what exceeds ``graph_capacity``."""

    def __init__(self, capacity, graph_capacity):
        super().__init__(capacity)
        self.graph_capacity = graph_capacity

    def pre_ops(self, size):
        pre = super().pre_ops(size)
        return pre._replace(inputs=dict(size=self.size(size)))

    def graph(self, inputs):
        return dict(dropped=max(0, inputs['size'] - self.graph_capacity))

    def tier_overflow(self, outputs):
        return {'max_graph': outputs['dropped']} if outputs['dropped'] else {}


def test_run_on_tiers_moves_on_when_the_graph_overflows_a_scaled_bound():
    adapters = [GraphSizedAdapter(10, 5), GraphSizedAdapter(20, 30), GraphSizedAdapter(40, 60)]
    tiers = [Tier(scale, {}, a, a.graph) for scale, a in zip((0.25, 0.5, 1.0), adapters)]
    for size, taken, attempts, dropped in ((4, 0.25, [0.25], 0), (8, 0.5, [0.25, 0.5], 0), (25, 1.0, [1.0], 0),
                                           (70, 1.0, [1.0], 10)):
        seconds = []
        tier, pre, outputs, tried = run_on_tiers(tiers, size, seconds)
        assert (tier.scale, tried, outputs['dropped']) == (taken, attempts, dropped), size
        assert pre.inputs == dict(size=size) and len(seconds) == len(tried)


@pytest.fixture(scope='module')
def tiered_export(tiny, kitti_frame, tmp_path_factory):
    """Tiny FSD-lite, tiers 0.5 and 0.8, bounds = KITTI 000008's needs x 1.5 (the frame needs 0.67 of them) but for
    the refiner's pairs: twice what the frame or its left half needs. The random weights' boxes, the best 64 of
    hundreds, do not thin out with the frame as a trained model's do, and that bound alone would send the half frame
    to the larger tier."""
    def needs(frame):  # x 1.5, as the exporter measures them
        return prepare(tiny.configs['fsd'], 'random', cfg_options=tiny.options['fsd'], frames=[frame])[1].bounds

    bounds, half = needs(kitti_frame), needs(half_frame(kitti_frame))
    bounds['max_refiner_pairs'] = 2 * max(bounds['max_refiner_pairs'], half['max_refiner_pairs'])
    return export_model(tiny.configs['fsd'], 'random', tmp_path_factory.mktemp('fsd_tiers'),
                        cfg_options=tiny.options['fsd'], frames=[kitti_frame], bounds=bounds, tiers=(0.8, 0.5))


def half_frame(frame):
    """The left half of the scene (y > 0): about half the points, voxels and rulebook pairs at every level
    (subsampling the points would not do: the voxels of the coarse levels barely thin out)."""
    cloud = frame.data[0]
    return Frame('kitti_left', [cloud[cloud[:, 1] > 0].contiguous()], frame.source)


def test_tier_graphs_are_written_checked_and_listed(tiered_export):
    info = json.loads((tiered_export.out_dir / 'deploy.json').read_text())
    assert [t['scale'] for t in info['tiers']] == [0.5, 0.8]
    for tier, exported in zip(info['tiers'], tiered_export.tiers):
        assert (tiered_export.out_dir / tier['onnx']).is_file()
        assert exported.summary.ok, exported.summary.problems
        assert exported.diffs and all(d.ok for d in exported.diffs)
        assert tier['bounds']['max_points'] == -(-info['bounds']['max_points'] * tier['scale'] // 1)
        assert tier['bounds']['max_fg_points'] == info['bounds']['max_fg_points']  # in-graph bounds stay
    assert [t['example_fits'] for t in info['tiers']] == [False, True]
    report = (tiered_export.out_dir / 'report.md').read_text()
    assert '## Capacity tiers' in report and 'model_tier0.5.onnx' in report


def test_each_frame_runs_on_the_smallest_tier_it_fits_with_the_full_graphs_results(tiered_export, kitti_frame):
    deployed = DeployedModel(tiered_export.out_dir)
    full = deployed.tiers[-1]
    for frame, scale in ((kitti_frame, 0.8), (half_frame(kitti_frame), 0.5)):
        out = deployed.run(frame.data)
        assert out.tier == scale and set(out.dropped.values()) == {0}, (out.tier, out.dropped)
        pre = full.adapter.pre_ops(frame.data)
        reference = full.graph(pre.inputs)
        assert out.pre.inputs['points'].shape[0] < pre.inputs['points'].shape[0]  # the tier's smaller padding
        n, k = int(reference['num_boxes']), int(reference['num_instances'])
        assert int(out.outputs['num_boxes']) == n > 0 and int(out.outputs['num_instances']) == k
        for name, rows in (('boxes', n), ('scores', n), ('cls_logits', k), ('box_codes', k)):
            assert torch.allclose(out.outputs[name][:rows], reference[name][:rows], atol=1e-5), name
        assert torch.equal(out.outputs['labels'][:n], reference['labels'][:n])


def test_verify_checks_each_frame_on_its_tier(tiered_export, kitti_frame):
    checks = verify_deploy(tiered_export.out_dir, frames=[kitti_frame, half_frame(kitti_frame)])
    assert [c.tier for c in checks] == [0.8, 0.5]
    assert all(c.ok and not c.exceeded and c.match.same for c in checks), checks


def test_tiers_need_a_family_with_pre_op_bounds(tiny, tmp_path):
    with pytest.raises(ValueError, match='tiers: VoxelNet has no pre-op bounds to scale'):
        export_model(tiny.configs['voxelnet'], 'random', tmp_path, cfg_options=tiny.options['voxelnet'],
                     tiers=(0.5,))


def test_tier_pre_ops_reuse_the_full_rulebooks_exactly(tiered_export, kitti_frame):
    """The tiers cut the full tier's rulebooks to their bounds (no rebuild): the same inputs as building them at the
    tier's bounds, and ``may_fit`` says exactly whether the tier's pre-ops would drop anything -- also for the right
    half of the scene, whose points and voxels fit the 0.5 tier but whose coarsest UNet level does not."""
    deployed = DeployedModel(tiered_export.out_dir)
    cloud = kitti_frame.data[0]
    right = Frame('kitti_right', [cloud[cloud[:, 1] < 0].contiguous()], kitti_frame.source)
    small = deployed.tiers[0]
    dropped = small.adapter.pre_ops(right.data).dropped
    assert dropped['max_points'] == dropped['max_voxels[0]'] == 0 and dropped['max_voxels[2]'] > 0, dropped
    for frame in (kitti_frame, half_frame(kitti_frame), right):
        prepared = deployed.tiers[-1].adapter.measure_needs(frame.data)
        for tier in deployed.tiers:
            direct = tier.adapter.pre_ops(frame.data)  # prepares and builds at the tier's own bounds
            assert tier.adapter.may_fit(prepared) == (not any(direct.dropped.values())), (frame.name, tier.scale)
            if tier.adapter.may_fit(prepared):
                reused = tier.adapter.pre_ops(prepared)
                assert reused.dropped == direct.dropped
                for name, tensor in direct.inputs.items():
                    assert torch.equal(reused.inputs[name], tensor), (frame.name, tier.scale, name)


def test_pre_ops_tile_the_exact_pairs_into_the_map_built_pair_lists(tiered_export, kitti_frame):
    """The pre-ops build the pair lists from the exact offset-grouped pairs, shared by every tier (no neighbour
    maps): the same graph inputs and drop counts as the lists of the maps built at each tier's bounds, also for the
    tier the whole frame overflows (its points; then its first level takes the map path, cut and counted)."""
    deployed = DeployedModel(tiered_export.out_dir)
    for frame in (kitti_frame, half_frame(kitti_frame)):
        prepared = deployed.tiers[-1].adapter.prepare_input(frame.data)
        assert prepared.maps is not None and len(prepared.maps.needed) == 3
        for tier in deployed.tiers:
            model = tier.adapter.model
            with torch.no_grad():
                exact = fixed_inputs(model, prepared.inputs, strict=False, maps=prepared.maps)
                maps = first_stage_rulebooks(model, prepared.inputs, strict=False, neighbour_maps=True)
                by_maps = fixed_inputs(model, prepared.inputs, strict=False, maps=maps)
            assert torch.equal(exact.dropped, by_maps.dropped), (frame.name, tier.scale)
            assert len(exact.nbrs) == len(by_maps.nbrs)
            for name, a, b in zip(exact._fields, exact, by_maps):
                pairs = zip(a, b) if name == 'nbrs' else [(a, b)]
                assert all(torch.equal(x, y) for x, y in pairs), (frame.name, tier.scale, name)


def test_fsdv2_tiers_scale_the_mixer_bounds_and_retry_when_they_overflow(tiny, kitti_frame, tmp_path):
    """FSDv2-lite's tiers also scale the mixer's in-graph bounds (max_virtual_voxels / max_virtual_pairs).  With the
    mixer bounds at the frame's exact needs and the pre-op bounds at 1.5x, the 0.8 tier's pre-ops hold the frame but
    its mixer does not: the frame runs again on the full graph, which drops nothing and gives its own results."""
    _, adapter, frames, _ = prepare(tiny.configs['fsdv2'], 'random', cfg_options=tiny.options['fsdv2'],
                                    frames=[kitti_frame])
    exact = type(adapter).measure_bounds(adapter.model, frames, 1.0)
    assert set(adapter.tier_graph_bound_names) == {'max_virtual_voxels', 'max_virtual_pairs'}
    tight = {k: exact[k] for k in adapter.tier_graph_bound_names if k in adapter.bounds}
    assert tight, adapter.bounds
    bounds = dict(adapter.bounds, **tight)
    result = export_model(tiny.configs['fsdv2'], 'random', tmp_path, cfg_options=tiny.options['fsdv2'],
                          frames=[kitti_frame], bounds=bounds, tiers=(0.8,))
    tier_info = result.info['tiers'][0]
    for name, value in tight.items():
        assert tier_info['bounds'][name] == scale_bounds({name: value}, 0.8)[name]
    assert tier_info['example_fits'] is False  # the pre-ops fit, the mixer does not
    deployed = DeployedModel(tmp_path)
    out = deployed.run(kitti_frame.data)
    assert out.attempts == (0.8, 1.0) and out.tier == 1.0
    assert not any(out.dropped.values()), out.dropped
    full = deployed.tiers[-1]
    reference = full.graph(full.adapter.pre_ops(kitti_frame.data).inputs)
    for name in ('boxes', 'scores', 'num_boxes', 'dropped'):
        assert torch.equal(out.outputs[name], reference[name]), name
    checks = verify_deploy(tmp_path, frames=[kitti_frame])
    assert checks[0].attempts == (0.8, 1.0) and checks[0].ok and not checks[0].exceeded, checks
    assert 'capacity tier 1 (tier 0.8 overflowed an in-graph bound the tiers scale)' in format_checks(checks)
