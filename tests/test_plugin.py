"""The plugin example registers a component through custom_imports; a config using it builds and runs."""
import sys
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / 'examples' / 'plugin'


@pytest.fixture
def plugin_on_path(monkeypatch):
    from fsdlite.registry import MODELS
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    yield
    sys.modules.pop('fsdlite_plugin_example', None)
    for name in ('ResidualPointSegHead', 'ChannelGate'):  # the next import registers them afresh
        MODELS._module_dict.pop(name, None)


def test_config_with_plugin_head_builds_and_runs(plugin_on_path):
    from fsdlite.registry import MODELS
    cfg = Config.fromfile(str(PLUGIN_DIR / 'configs' / 'segmentor_with_plugin_head.py'))
    assert 'fsdlite_plugin_example' in sys.modules  # imported by custom_imports, not by this test
    model = MODELS.build(cfg.model)
    assert type(model.seg_head).__name__ == 'ResidualPointSegHead'
    out = model.seg_head(torch.randn(5, model.seg_head.shortcut.in_features))
    assert out['seg_logits'].shape == (5, 3)


def test_tools_find_the_plugin_beside_the_config(monkeypatch):
    """read_config (every tool's config loader) puts the plugin's folder on sys.path: no PYTHONPATH needed."""
    from fsdlite.engine.tool_setup import plugin_folder, read_config
    from fsdlite.registry import MODELS
    monkeypatch.setattr(sys, 'path', [p for p in sys.path if Path(p or '.').resolve() != PLUGIN_DIR])
    sys.modules.pop('fsdlite_plugin_example', None)
    config = PLUGIN_DIR / 'configs' / 'segmentor_with_plugin_head.py'
    assert plugin_folder('fsdlite_plugin_example', config) == str(PLUGIN_DIR)
    assert plugin_folder('fsdlite.models', config) is None  # importable already
    try:
        cfg = read_config(str(config))
        assert str(PLUGIN_DIR) in sys.path and 'fsdlite_plugin_example' in sys.modules
        assert type(MODELS.build(cfg.model).seg_head).__name__ == 'ResidualPointSegHead'
    finally:
        sys.modules.pop('fsdlite_plugin_example', None)
        for name in ('ResidualPointSegHead', 'ChannelGate'):
            MODELS._module_dict.pop(name, None)


def test_config_without_plugin_on_path_fails_clearly():
    sys.modules.pop('fsdlite_plugin_example', None)
    with pytest.raises(ImportError, match='fsdlite_plugin_example'):
        Config.fromfile(str(PLUGIN_DIR / 'configs' / 'segmentor_with_plugin_head.py'))


def test_plugin_layer_declares_how_it_slims(plugin_on_path, tmp_path):
    """ChannelGate's slim_spec: at width 0.5 its gate keeps exactly the channels kept in the features it gates
    (the shared MLP output and the shortcut), and width 1.0 reproduces the model."""
    from fsdlite.slim.api import max_abs_diff, prepare, write_slim
    from fsdlite.slim.engine import SlimRequest
    options = {'val_dataloader.dataset.num_frames': 1, 'val_dataloader.dataset.lidar.num_beams': 16,
               'model.backbone.base_channels': 8, 'model.backbone.encoder_channels': ((8,), (16,), (16,)),
               'model.backbone.decoder_channels': ((16, 16, 16), (16, 16, 8), (8, 8, 8)),
               'model.voxel_encoder.feat_channels': (8, 8), 'model.seg_head.hidden_channels': (16, 16)}
    torch.manual_seed(0)
    p = prepare(str(PLUGIN_DIR / 'configs' / 'segmentor_with_plugin_head.py'), None, options)
    with torch.no_grad():
        p.model.seg_head.gate.logit.normal_()  # distinct values, so the kept set is visible in the slim weights
    same = write_slim(p, SlimRequest(width=1.0), tmp_path / 'same')
    with torch.no_grad():
        assert max_abs_diff(same.slim_model(**p.data, mode='tensor'), p.model(**p.data, mode='tensor')) == 0
    half = write_slim(p, SlimRequest(width=0.5), tmp_path / 'half')
    state, original = half.result.state_dict, p.model.state_dict()
    gate = state['seg_head.gate.logit']
    assert gate.shape == (8,)
    kept = [int((original['seg_head.gate.logit'] == v).nonzero()) for v in gate]
    assert len(set(kept)) == 8
    # the classifier reads the gated channels: its kept input columns are the gate's kept channels, in order
    assert torch.equal(state['seg_head.cls_layer.weight'], original['seg_head.cls_layer.weight'][:, kept])
    with torch.no_grad():
        assert half.slim_model(**p.data, mode='tensor')['seg_logits'].shape[-1] == 3
