"""benchmarks/deploy_stages.py: ONNX nodes billed to the detector stage of the submodule that emitted them."""
import onnx
import pytest
from onnx import helper


@pytest.fixture
def deploy_stages(load_benchmark):
    """benchmarks/deploy_stages.py loaded from its file."""
    return load_benchmark('deploy_stages')


def _node(scopes):
    node = helper.make_node('Relu', ['x'], ['y'], name='n')
    if scopes is not None:
        node.metadata_props.append(onnx.StringStringEntryProto(key='pkg.torch.onnx.name_scopes', value=repr(scopes)))
    return node


@pytest.mark.parametrize('scopes, stage', [
    (['', 'model.backbone', 'model.backbone.lateral.0', 'bmm_53'], 'backbone'),
    (['', 'model.refiner.sir', 'model.refiner.sir.blocks.0', 'scatter_add_13'], 'refiner'),
    (['', 'model.sir', 'model.sir.blocks.1', 'linear_4'], 'sir'),
    (['', 'model.seg_head', 'linear_2'], 'neck_head'),
    (['', 'model.voxel_encoder', 'cat_3'], 'vfe'),
    (['', 'scatter_reduce_1'], 'instances'),           # an op of the detector itself (grouping, gathers)
    (['', 'model.unknown_part', 'add_1'], 'instances'),
    (None, 'instances'),                               # no metadata
])
def test_node_stage_follows_the_submodule_scope(deploy_stages, scopes, stage):
    assert deploy_stages.node_stage(_node(scopes)) == stage


def test_stage_rows_in_pipeline_order_with_ratios(deploy_stages):
    result = dict(eager_ms=dict(vfe=4.0, backbone=20.0, other=1.0, total=25.0),
                  ort_ms=dict(host_pre_ops=2.0, backbone=30.0, vfe=2.0, fused=1.0, graph_rest=-0.5, total=35.0))
    rows = deploy_stages.stage_rows(result)
    assert [r[0] for r in rows] == ['host_pre_ops', 'vfe', 'backbone', 'fused', 'graph_rest', 'other', 'total']
    assert rows[2] == ['backbone', '20.0', '30.0', '1.50x'] and rows[0][3] == '-'
    assert rows[-1] == ['total', '25.0', '35.0', '1.40x']
