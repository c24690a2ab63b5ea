"""Depth reduction drops whole blocks of a stage; kept blocks keep their weights."""
import torch

from fsdlite.slim.api import write_slim


def test_dropping_residual_blocks_keeps_the_remaining_weights(prepared, slim_kit, tmp_path):
    p = prepared('kpcnn')
    out = write_slim(p, slim_kit.Request(depth={'backbone.blocks.3': 1}), tmp_path)
    res = out.result
    assert ('backbone.blocks.3', 2, 1, 'depth') in res.changes
    assert res.dropped and all(name.startswith('backbone.stages.3.1.') for name in res.dropped)
    original = p.model.state_dict()
    assert set(res.state_dict) == {k for k in original if not k.startswith('backbone.stages.3.1.')}
    assert all(torch.equal(v, original[k]) for k, v in res.state_dict.items())   # width 1: untouched
    with torch.no_grad():
        assert out.slim_model(**p.data, mode='tensor').shape == p.model(**p.data, mode='tensor').shape


def test_truncating_a_plain_stage_bridges_the_dropped_conv(prepared, slim_kit, tmp_path):
    """Encoder stage 1 of the sparse UNet is (conv16, conv16) -> (conv16,): the lateral and the next stage now
    read the first conv, position for position (same widths), so their weights are kept as they are."""
    p = prepared('segmentor')
    out = write_slim(p, slim_kit.Request(depth={'backbone.encoder_channels.1': 1}), tmp_path)
    res = out.result
    assert res.bridged == ['backbone.encoder_channels.1']
    assert res.dropped == ['backbone.encoder.1.1.0', 'backbone.encoder.1.1.1']
    original = p.model.state_dict()
    assert all(torch.equal(v, original[k]) for k, v in res.state_dict.items())
    with torch.no_grad():
        got = out.slim_model(**p.data, mode='tensor')
    assert got['seg_logits'].shape == p.model(**p.data, mode='tensor')['seg_logits'].shape


def test_dropping_a_sir_block_shrinks_the_head_input(prepared, slim_kit, tmp_path):
    p = prepared('fsd')
    out = write_slim(p, slim_kit.Request(width=0.5, depth={'sir.block_channels': 2}), tmp_path)
    res = out.result
    assert not res.bridged                                   # its outputs only fed the head: they vanish
    head_in = out.slim_model.bbox_head.shared[0].linear.in_features
    assert head_in == out.slim_model.sir.out_channels == 2 * (8 + 8)
    with torch.no_grad():
        out.slim_model(**p.data, mode='predict')


def test_dropping_a_hidden_layer_moves_the_output_layer_up(prepared, slim_kit, tmp_path):
    """GravNet's MLP (hidden 16, 16 -> output) becomes (hidden 16 -> output): the output Linear changes its
    position in the Sequential (index 2 -> 1) and keeps its weights; the dropped 16 -> 16 layer is bridged."""
    p = prepared('voxelnet')
    out = write_slim(p, slim_kit.Request(depth={'muon_stage.gravnet.hidden_channels': 1}), tmp_path)
    res = out.result
    assert res.bridged == ['muon_stage.gravnet.hidden_channels']
    assert res.dropped == ['muon_stage.gravnet.coords_and_messages.1.linear']
    original = p.model.state_dict()
    prefix = 'muon_stage.gravnet.coords_and_messages.'
    assert torch.equal(res.state_dict[prefix + '1.weight'], original[prefix + '2.weight'])
    assert torch.equal(res.state_dict[prefix + '0.linear.weight'], original[prefix + '0.linear.weight'])
    with torch.no_grad():
        assert out.slim_model(**p.data, mode='tensor').shape == p.model(**p.data, mode='tensor').shape
