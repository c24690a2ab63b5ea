"""VoxelNet, KPFCNN and KPCNN (real configs at tiny widths, random weights): export to plain ONNX, ONNX Runtime vs
PyTorch on the configs' synthetic data, same labels as the eager model, bound overflow counted and reported."""
import pytest
import torch

from fsdlite.deploy import DeployedModel, export_model, prepare
from fsdlite.deploy.compare import OutputDiff
from fsdlite.deploy.kpconv import pad_index
from fsdlite.deploy.verify import FrameCheck, float64_distances, verify_deploy


def assert_graph_ok(result, names_in, names_out):
    summary = result.summary
    assert summary.ok, summary.problems
    assert summary.opset >= 18
    assert [s.name for s in summary.inputs] == names_in and [s.name for s in summary.outputs] == names_out
    for spec in summary.inputs + summary.outputs:
        assert all(isinstance(d, int) and d > 0 for d in spec.shape), spec
    assert result.diffs and all(d.ok and d.compared > 0 for d in result.diffs), result.diffs


def verify_frames(directory, tiny, name, batch_size):
    """ORT graph vs PyTorch graph and final predictions vs the eager model on every config frame."""
    deployed = DeployedModel(directory)
    _, adapter, frames, _ = prepare(tiny.configs[name], 'random', cfg_options=tiny.options[name],
                                    batch_size=batch_size, bounds=deployed.info['bounds'])
    adapter.load_host_state(deployed.info['host_state'])
    assert len(frames) == 2
    for frame in frames:
        out = deployed.run(frame.data)
        assert all(v == 0 for v in out.dropped.values()), out.dropped
        diffs = adapter.compare_outputs(out.outputs, adapter.run_torch_graph(out.pre.inputs), out.pre)
        assert all(d.ok for d in diffs), diffs
        match = adapter.compare_results(out.results, adapter.reference(frame.data))
        assert match.same, match.detail
    return deployed, adapter, frames


def test_voxelnet_export_and_verify(tiny, tmp_path):
    result = export_model(tiny.configs['voxelnet'], 'random', tmp_path, cfg_options=tiny.options['voxelnet'],
                          batch_size=2)
    assert result.info['bounds'] == dict(num_voxels=18, num_muons=24)
    assert_graph_ok(result, ['muon_features', 'voxel_centres'], ['log_probs'])
    assert result.summary.inputs[0].shape == (2, 18, 24, 9)
    assert 'TopK' in result.summary.op_counts  # the GravNet kNN stays in the graph as a fixed-size TopK
    deployed, adapter, frames = verify_frames(tmp_path, tiny, 'voxelnet', 2)
    data = frames[0].data
    out = deployed.run(data)
    fp64 = float64_distances(adapter, out, adapter.run_torch_graph(out.pre.inputs), ['log_probs'])
    ort64, torch64 = fp64['log_probs']
    assert 0 < ort64 < 1e-5 and 0 < torch64 < 1e-5  # float32 vs float64 rounding only
    assert next(adapter.model.parameters()).dtype == torch.float32  # the float64 run used a copy
    with pytest.raises(ValueError, match=r'muon_features of shape \(2, 18, 24, 9\).*got \(2, 18, 20, 9\)'):
        deployed.run(dict(data, muon_features=data['muon_features'][:, :, :20]))
    bad = data['muon_features'].clone()
    bad[0, 0, 0, 0] = float('nan')
    with pytest.raises(ValueError, match='muon_features contains 1 non-finite'):
        deployed.run(dict(data, muon_features=bad))


@pytest.fixture(scope='module')
def kpfcnn_export(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp('kpfcnn')
    return export_model(tiny.configs['kpfcnn'], 'random', out, cfg_options=tiny.options['kpfcnn'])


def test_kpfcnn_export_and_verify(tiny, kpfcnn_export):
    info = kpfcnn_export.info
    caps, limits = info['bounds']['max_points'], info['host_state']['neighbor_limits']
    assert len(caps) == len(limits) == 4 and min(limits) >= 1
    names = (['features'] + [f'points_l{i}' for i in range(4)] + [f'neighbors_l{i}' for i in range(4)]
             + [f'pools_l{i}' for i in range(3)] + [f'upsamples_l{i}' for i in range(3)])
    assert_graph_ok(kpfcnn_export, names, ['logits'])
    assert kpfcnn_export.summary.inputs[5].shape == (caps[0], limits[0])
    verify_frames(kpfcnn_export.out_dir, tiny, 'kpfcnn', 1)


def test_kpfcnn_overflow_is_counted(tiny, kpfcnn_export):
    """A cloud denser than the bounds: level-0 points beyond max_points[0] are dropped, counted and reported; their
    input points still get a prediction (uniform scores), nothing is lost silently."""
    deployed = DeployedModel(kpfcnn_export.out_dir)
    _, adapter, frames, _ = prepare(tiny.configs['kpfcnn'], 'random', cfg_options=tiny.options['kpfcnn'],
                                    bounds=deployed.info['bounds'])
    cloud = frames[0].data[0]
    dense = torch.cat([cloud, cloud + torch.tensor([3.0, 0.0, 0.0] + [0.0] * (cloud.shape[1] - 3))])
    out = deployed.run([dense])
    caps = deployed.info['bounds']['max_points']
    with torch.no_grad():
        pyramid = adapter.model.data_preprocessor(dict(inputs=dict(points=[dense])), False)['inputs']
    needed = [int(p.shape[0]) for p in pyramid.points[:4]]
    assert out.dropped['max_points[0]'] == needed[0] - caps[0] > 0
    assert out.dropped == {f'max_points[{i}]': max(n - c, 0) for i, (n, c) in enumerate(zip(needed, caps))}
    assert out.pre.context['num_valid'] == caps[0]
    scores = out.results[0].pred_pts_seg.pts_scores
    assert scores.shape[0] == dense.shape[0]
    uniform = torch.isclose(scores, torch.full_like(scores, 1.0 / scores.shape[1])).all(1)
    assert int(uniform.sum()) == int((pyramid.cells >= caps[0]).sum()) > 0


def test_kpcnn_involution_classifier_export_and_verify(tiny, tmp_path):
    """KPCNN (KPInv layers), batch 2: the per-sample average is a fixed-shape segment mean with a dump slot."""
    result = export_model(tiny.configs['kpcnn'], 'random', tmp_path, cfg_options=tiny.options['kpcnn'], batch_size=2)
    caps = result.info['bounds']['max_points']
    names = (['features'] + [f'points_l{i}' for i in range(4)] + [f'neighbors_l{i}' for i in range(4)]
             + [f'pools_l{i}' for i in range(3)] + ['batch_last'])
    assert_graph_ok(result, names, ['logits'])
    assert result.summary.inputs[-1].shape == (caps[-1],) and result.summary.outputs[0].shape == (2, 6)
    checks = verify_deploy(tmp_path)
    assert len(checks) == 2 and all(c.ok and not c.exceeded and c.match.same for c in checks), checks
    assert all(c.match.detail.startswith('2/2 labels equal') for c in checks)


def test_float64_fallback_rule():
    """An output beyond tolerance passes only when ORT is no farther from float64 than PyTorch float32 is."""
    diff = OutputDiff('cls_logits', 10, 6e-4, 1e-4, 1e-4)
    check = FrameCheck('f', 's', [diff], None, {}, {}, fp64={'cls_logits': (2.7e-4, 3.3e-4)})
    assert check.output_ok(diff)
    assert not check._replace(fp64={'cls_logits': (5e-4, 3.3e-4)}).output_ok(diff)
    assert not check._replace(fp64={}).output_ok(diff)
    # float64 far from float32 too: another discrete branch, the check cannot judge
    assert not check._replace(fp64={'cls_logits': (0.9, 0.9)}).output_ok(diff)


def test_pad_index_moves_shadows_to_the_bound():
    index = torch.tensor([[0, 1, 3], [2, 3, 3], [1, 0, 3]])  # shadow 3 (3 valid source rows)
    out = pad_index(index, valid_rows=2, rows=4, width=2, bound_in=5, kept_in=2)
    assert out.tolist() == [[0, 1], [5, 5], [5, 5], [5, 5]]
    wide = pad_index(index, valid_rows=3, rows=4, width=4, bound_in=7, kept_in=3)  # extra column and row: shadows
    assert wide.tolist() == [[0, 1, 7, 7], [2, 7, 7, 7], [1, 0, 7, 7], [7, 7, 7, 7]]
