"""FSD-lite / FSDv2-lite (tiny widths, random weights): export to plain ONNX, ONNX Runtime vs PyTorch on the KITTI
frame, identical detections after NMS, and a bound overflow reported through the graph's ``dropped`` output."""
import json

import pytest
import torch

from fsdlite.deploy import DeployedModel, export_model, prepare
from fsdlite.deploy.detector import TOLERANCE


def assert_deployable(result):
    """Standard ops only, opset >= 18, static input/output shapes, every output within tolerance."""
    summary = result.summary
    assert summary.ok, summary.problems
    assert summary.opset >= 18
    for spec in summary.inputs + summary.outputs:
        assert spec.shape is not None and all(isinstance(d, int) for d in spec.shape), spec
    assert result.diffs and all(d.ok for d in result.diffs), [d for d in result.diffs if not d.ok]


@pytest.fixture(scope='module')
def fsd_export(tiny, kitti_frame, tmp_path_factory):
    out = tmp_path_factory.mktemp('fsd')
    return export_model(tiny.configs['fsd'], 'random', out, cfg_options=tiny.options['fsd'], frames=[kitti_frame])


def test_fsd_export_writes_a_deployable_folder(fsd_export):
    assert_deployable(fsd_export)
    info = json.loads((fsd_export.out_dir / 'deploy.json').read_text())
    assert info['model_type'] == 'FSDLite' and info['checkpoint'] == 'random'
    assert info['bounds_source'].startswith('measured on 1 frame(s) (kitti) x margin 1.5')
    names = [e['name'] for e in info['inputs']]
    assert names[:6] == ['points', 'batch', 'num_points', 'point2voxel', 'voxel_coors', 'num_voxels']
    assert any(n.startswith('nbr_') for n in names) and all(e['in_graph'] for e in info['inputs'])
    assert info['inputs'][0]['shape'] == [info['bounds']['max_points'], 4]
    pair_inputs = [e for e in info['inputs'] if e['name'].startswith('nbr_')]  # the UNet runs on pair lists
    assert len(info['bounds']['max_pairs']) == 5 and all(e['shape'][0] == 3 for e in pair_inputs)
    assert info['dropped_names'][-2:] == ['max_boxes', 'max_refiner_pairs']  # the refiner's pairs come packed
    assert 'BatchNormalization' not in info['graph']['op_counts']  # folded into the layers at export
    assert any('NMS' in t for t in info['outside_graph']['post_ops'])
    report = (fsd_export.out_dir / 'report.md').read_text()
    assert 'deployable: yes' in report and '| seg_logits |' in report


def test_fsd_deployed_detections_equal_eager_pytorch(fsd_export, kitti_frame):
    deployed = DeployedModel(fsd_export.out_dir)
    out = deployed.run(kitti_frame.data)
    assert set(out.dropped.values()) == {0}, out.dropped
    assert int(out.outputs['num_boxes']) > 0
    _, adapter, _, _ = prepare(fsd_export.out_dir / 'config.py', 'random', frames=[kitti_frame],
                               bounds=deployed.info['bounds'])
    # the graph in PyTorch with the exported weights, fed the deployed pre-ops' tensors
    diffs = adapter.compare_outputs(out.outputs, adapter.run_torch_graph(out.pre.inputs), out.pre)
    assert all(d.ok for d in diffs), diffs
    reference = adapter.reference(kitti_frame.data)  # the eager dynamic model (spconv, NMS)
    ours, theirs = out.results[0].pred_instances_3d, reference[0].pred_instances_3d
    assert ours.bboxes_3d.shape[0] == theirs.bboxes_3d.shape[0] > 0
    assert torch.equal(ours.labels_3d.sort().values, theirs.labels_3d.sort().values)
    match = adapter.compare_results(out.results, reference)
    assert match.same, match.detail
    # the match notices a box moved by 10x the tolerance
    moved = out.results[0].pred_instances_3d.bboxes_3d.clone()
    moved[0, 0] += 10 * TOLERANCE
    out.results[0].pred_instances_3d.bboxes_3d = moved
    assert not adapter.compare_results(out.results, reference).same


def test_eager_runs_the_default_backend_and_predicts_like_the_reference(fsd_export, kitti_frame, monkeypatch):
    """``eager`` (the latency baseline users run) keeps the UNet's own backend ('auto': the fused CPU kernels),
    ``reference`` runs spconv; both predict the same boxes and restore the static model afterwards."""
    from fsdlite.models.lidar import SparseUNet
    _, adapter, _, _ = prepare(fsd_export.out_dir / 'config.py', 'random', frames=[kitti_frame])
    backends = []
    original = SparseUNet.resolved_conv_backend
    monkeypatch.setattr(SparseUNet, 'resolved_conv_backend',
                        lambda self, *a: backends.append(original(self, *a)) or backends[-1])
    reference = adapter.reference(kitti_frame.data)
    assert set(backends) == {'spconv'}
    backends.clear()
    eager = adapter.eager(kitti_frame.data)
    assert set(backends) == {'fsdlite'} and adapter.model.bounds is not None
    assert adapter.compare_results(eager, reference).same


def test_fsdv2_overflow_is_reported_in_the_dropped_output(tiny, kitti_frame, tmp_path):
    """max_boxes below the boxes the frame needs: the graph keeps the best max_boxes and counts the rest, in
    ONNX Runtime exactly as in PyTorch; the other outputs still agree."""
    _, measured, _, _ = prepare(tiny.configs['fsdv2'], 'random', cfg_options=tiny.options['fsdv2'],
                                frames=[kitti_frame])
    bounds = dict(measured.bounds, max_boxes=8)
    result = export_model(tiny.configs['fsdv2'], 'random', tmp_path, cfg_options=tiny.options['fsdv2'],
                          frames=[kitti_frame], bounds=bounds)
    assert_deployable(result)
    assert result.info['bounds_source'] == 'given' and 'instance_labels' not in result.info['graph']['op_counts']
    deployed = DeployedModel(tmp_path)
    out = deployed.run(kitti_frame.data)
    names = deployed.info['dropped_names']
    graph_dropped = dict(zip(names, out.outputs['dropped'].tolist()))
    needed = int(out.outputs['num_instances'])  # score_thr 0: every instance is a box candidate
    assert graph_dropped['max_boxes'] == needed - 8 > 0
    assert out.dropped['max_boxes'] == needed - 8
    assert int(out.outputs['num_boxes']) == 8
    assert all(v == 0 for k, v in out.dropped.items() if k != 'max_boxes'), out.dropped
    torch_out = measured.__class__(deployed.adapter.model, bounds).run_torch_graph(out.pre.inputs)
    assert torch.equal(torch_out['dropped'], out.outputs['dropped'])


@pytest.mark.parametrize('bound, index', [('max_pairs', 2), ('max_voxels', 1)])
def test_pre_ops_overflow_is_counted_not_raised(tiny, kitti_frame, bound, index):
    """A pre-ops bound (pairs of the level-1 submanifold map; voxels of UNet level 1) below the frame's needs: the
    pre-ops keep what fits, count the rest under its name, and the graph still runs."""
    _, measured, _, _ = prepare(tiny.configs['fsd'], 'random', cfg_options=tiny.options['fsd'], frames=[kitti_frame])
    values = list(measured.bounds[bound])
    values[index] = 100
    bounds = dict(measured.bounds, **{bound: values})
    _, adapter, _, _ = prepare(tiny.configs['fsd'], 'random', cfg_options=tiny.options['fsd'], frames=[kitti_frame],
                               bounds=bounds)
    pre = adapter.pre_ops(kitti_frame.data)
    name = f'{bound}[{index}]'
    assert pre.dropped[name] > 0
    assert all(v == 0 for k, v in pre.dropped.items() if k != name), pre.dropped
    assert int(adapter.run_torch_graph(pre.inputs)['num_fg_points']) > 0


def test_detector_bad_inputs(fsd_export, kitti_frame):
    deployed = DeployedModel(fsd_export.out_dir)
    with pytest.raises(ValueError, match='batches of 1 point clouds, got 2'):
        deployed.run(kitti_frame.data * 2)
