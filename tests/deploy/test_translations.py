"""fsdlite.deploy.translations: the custom ONNX translations export to standard ops, match PyTorch in ONNX
Runtime, and (GELU) take the form ONNX Runtime fuses into one kernel."""
import onnx
import onnxruntime as ort
import pytest
import torch

from fsdlite.deploy.onnx_io import export_graph


def _export(module, x, tmp_path):
    path = tmp_path / 'model.onnx'
    export_graph(module.eval(), (x,), path, ['x'], ['y'])
    return path


def _ort(path, x, optimized=None):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    session = ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
    return session.run(None, {'x': x.numpy()})[0]


@pytest.mark.parametrize('approximate', ['none', 'tanh'])
def test_gelu_matches_torch_and_is_fused_by_onnx_runtime(tmp_path, approximate):
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(approximate=approximate))
    x = torch.randn(300, 8, generator=torch.Generator().manual_seed(0)) * 3
    path = _export(module, x, tmp_path)
    graph = onnx.load(str(path)).graph
    assert all(n.domain in ('', 'ai.onnx') for n in graph.node)
    assert ('Tanh' if approximate == 'tanh' else 'Erf') in {n.op_type for n in graph.node}
    got = _ort(path, x, optimized=tmp_path / 'optimized.onnx')
    with torch.no_grad():
        assert torch.allclose(torch.from_numpy(got), module(x), atol=1e-5)
    fused = {n.op_type for n in onnx.load(str(tmp_path / 'optimized.onnx')).graph.node}
    if approximate == 'none':
        assert 'Gelu' in fused and 'Erf' not in fused  # one kernel instead of five element-wise ops



class _Lookups(torch.nn.Module):
    def forward(self, x):
        rows = torch.tensor([2, 0, 1, 2])
        column = x[:, 0] + 1  # 1-D, computed in the graph
        return x.index_select(0, rows) * 2, column.index_select(0, rows), x.index_select(1, torch.tensor([1, 0]))


def test_index_select_of_1d_tensors_exports_to_gather_elements(tmp_path):
    x = torch.randn(3, 2)
    path = tmp_path / 'model.onnx'
    export_graph(_Lookups().eval(), (x,), path, ['x'], ['rows', 'labels', 'columns'])
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count('GatherElements') == 1 and ops.count('Gather') >= 2
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    got = session.run(None, {'x': x.numpy()})
    want = _Lookups()(x)
    for a, b in zip(got, want):
        assert torch.equal(torch.from_numpy(a), b)
