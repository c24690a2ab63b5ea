"""Graph checks: only standard-domain ops, no data-dependent ops, static shapes, opset >= 18."""
import json

import onnx
import pytest
import torch
from onnx import TensorProto, helper

from fsdlite.deploy import DeployGraphError, check_graph, export_graph, require_deployable
from fsdlite.deploy.onnx_io import OrtGraph


def make_model(op='Relu', domain='', dims=(2, 3), opset=18, extra_domain=None):
    """A one-node ONNX model ``y = op(x)``."""
    x = helper.make_tensor_value_info('x', TensorProto.FLOAT, list(dims))
    if op == 'NonZero':  # (rank, count) with a data-dependent count: the output's shape stays unknown
        y = helper.make_tensor_value_info('y', TensorProto.INT64, None)
    else:
        y = helper.make_tensor_value_info('y', TensorProto.FLOAT, list(dims))
    node = helper.make_node(op, ['x'], ['y'], domain=domain)
    imports = [helper.make_opsetid('', opset)]
    if extra_domain:
        imports.append(helper.make_opsetid(extra_domain, 1))
    return helper.make_model(helper.make_graph([node], 'g', [x], [y]), opset_imports=imports)


def test_plain_graph_passes():
    summary = check_graph(make_model('Relu'))
    assert summary.ok, summary.problems
    assert summary.opset == 18 and summary.op_counts == {'Relu': 1} and summary.num_nodes == 1
    assert summary.inputs[0].shape == (2, 3)


def test_custom_domain_is_rejected():
    summary = check_graph(make_model('ScatterMax', domain='fsdlite', extra_domain='fsdlite'))
    assert any('custom opset domains' in p for p in summary.problems)
    assert any("'fsdlite::ScatterMax': 1" in p for p in summary.problems)
    with pytest.raises(DeployGraphError, match='outside the standard ONNX domain'):
        require_deployable(make_model('ScatterMax', domain='fsdlite', extra_domain='fsdlite'))


def test_nonzero_and_dynamic_shapes_and_low_opset_are_rejected():
    summary = check_graph(make_model('NonZero'))
    assert any("data-dependent or control-flow operators: {'NonZero': 1}" in p for p in summary.problems)
    assert "graph output 'y' has no shape (unknown rank)" in summary.problems
    summary = check_graph(make_model('Relu', dims=('N', 3)))
    assert summary.problems == ["graph input 'x' has a non-static shape ('N', 3)",
                                "graph output 'y' has a non-static shape ('N', 3)"]
    assert any('opset 17 < 18' in p for p in check_graph(make_model('Relu', opset=17)).problems)


def test_torch_nonzero_export_is_not_deployable(tmp_path):
    """A boolean-mask selection exported by torch.onnx becomes NonZero with a data-dependent shape: refused."""
    class Masked(torch.nn.Module):
        def forward(self, x):
            return (x[x > 0] * 2,)

    path = tmp_path / 'masked.onnx'
    export_graph(Masked(), (torch.randn(16),), path, ['x'], ['y'])
    summary = check_graph(path)
    assert 'NonZero' in summary.op_counts
    assert not summary.ok
    with pytest.raises(DeployGraphError, match='NonZero'):
        require_deployable(onnx.load(str(path)))


def test_export_graph_argument_errors(tmp_path):
    module = torch.nn.ReLU()
    with pytest.raises(ValueError, match='must be distinct'):
        export_graph(module, (torch.randn(2),), tmp_path / 'a.onnx', ['x'], ['x'])
    with pytest.raises(ValueError, match='1 inputs but 2 input names'):
        export_graph(module, (torch.randn(2),), tmp_path / 'a.onnx', ['x', 'z'], ['y'])
    with pytest.raises(ValueError, match='opset must be >= 18.*got 17'):
        export_graph(module, (torch.randn(2),), tmp_path / 'a.onnx', ['x'], ['y'], opset=17)


def test_ort_graph_runs_by_name_without_idle_spinning(tmp_path):
    """OrtGraph feeds and reads by name; its intra-op workers do not spin between runs (they would take the cores
    from the host pre-ops of the next frame)."""
    path = tmp_path / 'relu.onnx'
    onnx.save(make_model('Relu'), str(path))
    graph = OrtGraph(path, threads=2)
    x = torch.tensor([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]])
    assert torch.equal(graph(dict(x=x, unused=x))['y'], x.clamp(min=0))
    options = graph.session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.get_session_config_entry('session.intra_op.allow_spinning') == '0'
    with pytest.raises(KeyError, match='missing inputs'):
        graph({})


def test_ort_graph_profiles_its_nodes_on_request(tmp_path):
    """With ``profile_prefix`` every node's kernel time goes to a JSON profile (benchmarks/deploy_stages.py bills
    them to the detector's stages); without it nothing is profiled."""
    path = tmp_path / 'relu.onnx'
    onnx.save(make_model('Relu'), str(path))
    assert not OrtGraph(path).session.get_session_options().enable_profiling
    graph = OrtGraph(path, profile_prefix=tmp_path / 'prof')
    graph(dict(x=torch.ones(2, 3)))
    profile = graph.session.end_profiling()
    assert profile.startswith(str(tmp_path / 'prof'))
    with open(profile) as f:
        kernels = [e for e in json.load(f) if e.get('cat') == 'Node' and e['name'].endswith('_kernel_time')]
    assert [e['args']['op_name'] for e in kernels] == ['Relu']
