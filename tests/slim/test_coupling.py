"""Coupled layers keep consistent channel sets.

Functional check: zeroing, in the original model, every parameter slice of the dropped channels gives the
slimmed model's outputs (exact up to float rounding) when the network has no cross-channel statistics
(BatchNorm in eval mode; LayerNorm and attention scales depend on the width, so FSD's SIR is checked
structurally). A wrong coupling (a residual or grouped shortcut mixing a kept and a dropped channel) breaks it.
"""
import copy

import pytest
import torch

from fsdlite.slim.api import write_slim


def masked_original(model, result):
    """Copy of ``model`` with every dropped channel's parameter slices set to zero."""
    masked = copy.deepcopy(model)
    state = masked.state_dict()
    for name, t in state.items():
        for d, axis, view, view_axis in result.graph.by_param.get(name, ()):
            drop = torch.ones(d.size, dtype=torch.bool)
            drop[result.indices[d.id]] = False
            if view is not None and t.dim() > 1:
                t.view(view).index_fill_(view_axis, drop.nonzero()[:, 0], 0)
            else:
                t.index_fill_(axis, drop.nonzero()[:, 0], 0)
    return masked


@pytest.mark.parametrize('name', ['segmentor', 'kpcnn', 'kpcnn_x'])
def test_slimmed_model_equals_original_with_dropped_channels_zeroed(name, prepared, slim_kit, tmp_path):
    p = prepared(name)
    out = write_slim(p, slim_kit.Request(width=0.5), tmp_path)
    with torch.no_grad():
        ref = masked_original(p.model, out.result)(**p.data, mode='tensor')
        got = out.slim_model(**p.data, mode='tensor')
        full = p.model(**p.data, mode='tensor')
    if isinstance(got, dict):  # hidden features in the outputs are narrower: compare the head outputs
        keys = [k for k in got if got[k].shape == full[k].shape]
        assert keys
        ref, got, full = ([x[k] for k in keys] for x in (ref, got, full))
    assert slim_kit.max_abs_diff(ref, got) < 1e-4
    assert slim_kit.max_abs_diff(full, got) > 1e-3        # slimming did change the function


def _kept(result, leaf, role):
    d = result.graph.dim_of(leaf, role)
    return result.indices[d.id].tolist()


def test_unet_grouped_shortcut_keeps_whole_channel_pairs(prepared, slim_kit, tmp_path):
    out = write_slim(prepared('fsd'), slim_kit.Request(width=0.5), tmp_path)
    res = out.result
    for j in range(3):
        merged = _kept(res, f'backbone.merge.{j}.0', 'out')
        cat = _kept(res, f'backbone.merge.{j}.0', 'in')
        dims = res.graph.dim_of(f'backbone.merge.{j}.0', 'in'), res.graph.dim_of(f'backbone.merge.{j}.0', 'out')
        k = dims[0].size // dims[1].size
        assert cat == [k * m + i for m in merged for i in range(k)]     # merge output m <-> inputs k m .. k m + k - 1


def test_sir_gate_and_residual_chain_share_channels(prepared, slim_kit, tmp_path):
    res = write_slim(prepared('fsd'), slim_kit.Request(width=0.5), tmp_path).result
    for b in range(3):
        assert _kept(res, f'sir.blocks.{b}.layers.0.linear', 'out') == _kept(res, f'sir.blocks.{b}.gate.1', 'out')
    # block 1 adds its input (block 0's output) to its output, which block 2 reads: same channels on both
    # sides of the sum (block 2's sum is never read, so it constrains nothing)
    assert _kept(res, 'sir.blocks.0.layers.1.linear', 'out') == _kept(res, 'sir.blocks.1.layers.1.linear', 'out')
    assert len(_kept(res, 'sir.blocks.1.layers.1.linear', 'out')) == 8
    g = res.graph
    chain = [g.dim_of(f'sir.blocks.{b}.layers.1.linear', 'out').units for b in range(3)]
    assert chain[0] == chain[1]
    assert set(chain[2]).isdisjoint(chain[1])


def test_depthwise_kernels_and_generated_weights_follow_their_channel_groups(prepared, slim_kit, tmp_path):
    res = write_slim(prepared('kpcnn_x'), slim_kit.Request(width=0.5), tmp_path).result
    conv = 'backbone.stages.2.0.conv'
    channels = _kept(res, conv, 'param')                      # depthwise kernel (K, C): 64 -> 32 channels
    groups = sorted({c // 8 for c in channels})               # 8 channels per generated weight
    assert len(channels) == 8 * len(groups) == 8
    assert channels == [8 * g + i for g in groups for i in range(8)]
    gen = _kept(res, f'{conv}.attention.2', 'out')            # (K * W) generated weights, kernel-point major
    width = res.graph.dim_of(f'{conv}.attention.2', 'out').size // 5
    assert gen == [k * width + g for k in range(5) for g in groups]
    assert _kept(res, 'backbone.stages.2.0.unary1.linear', 'out') == channels
