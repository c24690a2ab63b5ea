"""Warm-up hook: schedule values and effect on a model's runtime_info."""
from types import SimpleNamespace

import pytest
from torch import nn

from fsdlite.engine.fsd_hooks import FSDWarmupHook, warmup_state
from fsdlite.registry import HOOKS


def test_schedule():
    assert warmup_state(0, 10, 0.2, 20) == ('topk', 0.0)
    assert warmup_state(9, 10, 0.2, 20) == ('topk', 0.0)
    mode, offset = warmup_state(10, 10, 0.2, 20)
    assert mode == 'threshold' and offset == pytest.approx(0.2)
    assert warmup_state(20, 10, 0.2, 20)[1] == pytest.approx(0.1)
    assert warmup_state(100, 10, 0.2, 20) == ('threshold', 0.0)
    assert warmup_state(5, 0, 0.2, 0) == ('threshold', 0.0)


class _Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.runtime_info = dict(fg_mode='threshold', threshold_offset=0.0)


def test_hook_sets_runtime_info():
    hook = HOOKS.build(dict(type='FSDWarmupHook', enable_after_iter=3, threshold_buffer=0.3, buffer_iter=3))
    model = _Model()
    runner = SimpleNamespace(model=model, iter=1)
    hook.before_train_iter(runner, 0)
    assert model.runtime_info == dict(fg_mode='topk', threshold_offset=0.0)
    runner.iter = 4
    hook.before_train_iter(runner, 0)
    assert model.runtime_info['fg_mode'] == 'threshold'
    assert model.runtime_info['threshold_offset'] == pytest.approx(0.2)


def test_hook_invalid():
    with pytest.raises(ValueError, match='threshold_buffer'):
        FSDWarmupHook(threshold_buffer=1.5)
    with pytest.raises(TypeError, match='runtime_info'):
        FSDWarmupHook().before_train_iter(SimpleNamespace(model=nn.Linear(1, 1), iter=0), 0)


def test_schedule_single_buffer_iteration():
    # buffer_iter=1: the full lowering at the enabling iteration, none one iteration later
    assert warmup_state(0, 0, 0.2, 1) == ('threshold', pytest.approx(0.2))
    assert warmup_state(1, 0, 0.2, 1) == ('threshold', 0.0)
    assert warmup_state(2, 0, 0.2, 1) == ('threshold', 0.0)
    assert warmup_state(4, 5, 0.3, 1) == ('topk', 0.0)
    assert warmup_state(5, 5, 0.3, 1) == ('threshold', pytest.approx(0.3))
    assert warmup_state(6, 5, 0.3, 1) == ('threshold', 0.0)


def test_hook_single_buffer_iteration():
    hook = FSDWarmupHook(enable_after_iter=0, threshold_buffer=0.25, buffer_iter=1)
    model = _Model()
    runner = SimpleNamespace(model=model, iter=0)
    hook.before_train_iter(runner, 0)
    assert model.runtime_info == dict(fg_mode='threshold', threshold_offset=pytest.approx(0.25))
    runner.iter = 1
    hook.before_train_iter(runner, 0)
    assert model.runtime_info == dict(fg_mode='threshold', threshold_offset=0.0)
