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
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    yield
    sys.modules.pop('fsdlite_plugin_example', None)


def test_config_with_plugin_head_builds_and_runs(plugin_on_path):
    from fsdlite.registry import MODELS
    cfg = Config.fromfile(str(PLUGIN_DIR / 'configs' / 'segmentor_with_plugin_head.py'))
    assert 'fsdlite_plugin_example' in sys.modules  # imported by custom_imports, not by this test
    model = MODELS.build(cfg.model)
    assert type(model.seg_head).__name__ == 'ResidualPointSegHead'
    out = model.seg_head(torch.randn(5, model.seg_head.shortcut.in_features))
    assert out['seg_logits'].shape == (5, 3)


def test_config_without_plugin_on_path_fails_clearly():
    sys.modules.pop('fsdlite_plugin_example', None)
    with pytest.raises(ImportError, match='fsdlite_plugin_example'):
        Config.fromfile(str(PLUGIN_DIR / 'configs' / 'segmentor_with_plugin_head.py'))
