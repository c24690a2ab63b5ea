"""The rulebook ops' export form (fsdlite.ops.GraphRulebookOps) against the C++ ops, and exported to ONNX."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite import ops

from _voxel_helpers import random_voxels


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10 ** 6), batch=st.integers(1, 2), density=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
       pad=st.integers(0, 5), kernel=st.sampled_from([1, 3]), stride=st.sampled_from([1, 2, 3]),
       padding=st.integers(0, 1), dilation=st.integers(1, 2), cut=st.integers(0, 3))
def test_graph_rulebooks_equal_ops(seed, batch, density, pad, kernel, stride, padding, dilation, cut):
    shape = (3, 6, 5)
    coors, n = random_voxels(shape, batch, density, pad, seed)
    graph = ops.GraphRulebookOps(batch)
    if kernel % 2:
        assert torch.equal(graph.rulebook_subm(coors, n, shape, kernel, dilation),
                           ops.rulebook_subm(coors, n, shape, kernel, dilation))
    try:
        ops.conv_output_shape(shape, kernel, stride, padding, dilation)
    except ValueError:
        return
    full = ops.rulebook_conv(coors, n, shape, kernel, stride, padding, dilation, max_out=max(n * 8, 1))
    max_out = max(int(full.num_valid_out) - cut, 0)  # cut > 0: outputs beyond the bound are dropped and counted
    a = graph.rulebook_conv(coors, torch.tensor(n), shape, kernel, stride, padding, dilation, max_out=max_out)
    b = ops.rulebook_conv(coors, n, shape, kernel, stride, padding, dilation, max_out=max_out)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert torch.equal(graph.rulebook_inverse(a.nbr, coors.shape[0]), ops.rulebook_inverse(b.nbr, coors.shape[0]))


def test_graph_rulebook_rejects_voxels_outside_the_key_space():
    coors = torch.tensor([[0, 0, 0, 0], [2, 0, 1, 1]])
    with pytest.raises(ValueError, match=r'coors\[1\] = \[2, 0, 1, 1\] lies outside batch_size 2'):
        ops.GraphRulebookOps(2).rulebook_subm(coors, 2, (2, 2, 2))
    with pytest.raises(ValueError, match='batch_size must be a positive int'):
        ops.GraphRulebookOps(0)


class _Maps(torch.nn.Module):
    """A submanifold map, a strided map and its inverse of the same padded voxels, as one graph."""

    def forward(self, coors, num_valid):
        graph, shape = ops.GraphRulebookOps(2), (4, 8, 6)
        subm = graph.rulebook_subm(coors, num_valid, shape, 3, 1)
        down = graph.rulebook_conv(coors, num_valid, shape, 3, 2, 1, 1, max_out=40)
        return subm, down.out_coors, down.num_valid_out, down.num_dropped, down.nbr, \
            graph.rulebook_inverse(down.nbr, coors.shape[0])


def test_graph_rulebooks_export_to_standard_onnx(tmp_path):
    """The export form runs in ONNX Runtime (standard operators only) with the C++ ops' results, for a voxel count
    other than the one it was exported with."""
    export_coors, export_n = random_voxels((4, 8, 6), 2, 0.1, 30, seed=0)
    coors, n = random_voxels((4, 8, 6), 2, 0.05, 0, seed=1)
    coors = torch.cat([coors, torch.zeros(export_coors.shape[0] - coors.shape[0], 4, dtype=torch.long)])
    path = tmp_path / 'maps.onnx'
    torch.onnx.export(_Maps().eval(), (export_coors, torch.tensor(export_n)), str(path), dynamo=True, opset_version=18,
                      external_data=False, input_names=['coors', 'num_valid'])
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    got = session.run(None, dict(coors=coors.numpy(), num_valid=np.array(n, dtype=np.int64)))
    want = [ops.rulebook_subm(coors, n, (4, 8, 6), 3, 1)]
    down = ops.rulebook_conv(coors, n, (4, 8, 6), 3, 2, 1, 1, max_out=40)
    want += [*down, ops.rulebook_inverse(down.nbr, coors.shape[0])]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.numpy())
    domains = {node.domain for node in onnx.load(str(path)).graph.node}
    assert domains <= {'', 'ai.onnx'}, domains
