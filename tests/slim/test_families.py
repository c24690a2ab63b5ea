"""Every family slims through its real config: identity reproduces the outputs exactly, width 0.5 writes a
config that builds and weights that load with strict=True, overriding only the width entries."""
import pytest
import torch
from mmengine.config import Config

from fsdlite.registry import MODELS
from fsdlite.slim.api import write_slim
from fsdlite.slim.configio import config_overrides, load_state_dict
from fsdlite.slim.entries import iter_ints, path_name

FAMILIES = ['segmentor', 'fsd', 'fsd_static', 'fsdv2', 'voxelnet', 'kpcnn', 'kpcnn_x']


def rebuild(out):
    """Model of the written config with the written checkpoint (strict)."""
    model = MODELS.build(Config.fromfile(out.config_path).model)
    model.load_state_dict(load_state_dict(out.checkpoint_path), strict=True)
    return model.eval()


@pytest.mark.parametrize('name', FAMILIES)
def test_identity_request_reproduces_the_original_exactly(name, prepared, slim_kit, tmp_path):
    p = prepared(name)
    out = write_slim(p, slim_kit.Request(width=1.0), tmp_path)
    assert out.result.changes == []
    # the written config reproduces the (--cfg-options) config it came from, nothing more
    assert config_overrides(p.cfg.to_dict(), Config.fromfile(out.config_path).to_dict()) == {}
    with torch.no_grad():
        assert slim_kit.max_abs_diff(p.model(**p.data, mode='tensor'), rebuild(out)(**p.data, mode='tensor')) == 0


@pytest.mark.parametrize('name', FAMILIES)
def test_half_width_builds_loads_and_runs(name, prepared, slim_kit, tmp_path):
    p = prepared(name)
    out = write_slim(p, slim_kit.Request(width=0.5), tmp_path)
    model = rebuild(out)
    with torch.no_grad():
        model(**p.data, mode='tensor')
        model(**p.data, mode='predict')
    before = sum(t.numel() for t in p.model.parameters())
    after = sum(t.numel() for t in model.parameters())
    assert after < 0.5 * before
    # the written config changes nothing but the model's width entries
    changed = config_overrides(p.cfg.to_dict(), Config.fromfile(out.config_path).to_dict())
    assert set(changed) == {'model'}
    widths = {n for n, _, _, kind in out.result.changes if kind in ('width', 'follower', 'solved')}
    original = dict((path_name(k), v) for k, v in iter_ints(p.cfg.model.to_dict()))
    written = dict((path_name(k), v) for k, v in iter_ints(Config.fromfile(out.config_path).model.to_dict()))
    assert {k for k in original if original[k] != written[k]} == widths
    assert all(written[k] < original[k] for k in widths)


def test_width_entries_are_found_by_probing_not_by_name(prepared):
    entries = {e.name: e for e in prepared('fsd').analysis.entries}
    assert entries['backbone.decoder_channels.1.2'].kind == 'width'
    assert entries['sir.rel_channels.0'].kind == 'width'
    assert entries['seg_head.num_classes'].kind != 'width'           # class outputs keep their width
    assert entries['fg_sampler.max_per_class.0'].kind == 'fixed'     # an int that shapes no parameter
    voxel = {e.name: e for e in prepared('voxelnet').analysis.entries}
    assert voxel['muon_stage.gravnet.k'].kind == 'fixed'
    assert voxel['muon_stage.gravnet.latent_dims'].kind == 'fixed'   # shares its layer with the messages
    assert voxel['muon_stage.collapse.out_channels'].kind == 'width'  # only builds with the next in_channels
    assert voxel['voxel_stage.gravnet.in_channels'].kind == 'follower'


def test_weights_of_kept_channels_are_copied_from_the_checkpoint(prepared, slim_kit, tmp_path):
    p = prepared('kpcnn')
    out = write_slim(p, slim_kit.Request(width=0.5), tmp_path)
    res, state = out.result, p.model.state_dict()
    for name, t in out.result.state_dict.items():
        ref = state[name]
        for d, axis, _, _ in res.graph.by_param.get(name, ()):
            ref = ref.index_select(axis, res.indices[d.id])
        assert torch.equal(t, ref), name
