"""One schedule rescaler for every tool: ``--cfg-options train_cfg.max_iters=N`` and ``max_iters=N`` both shorten
the cosine schedule with the run (they used to leave T_max at the config's length, or change nothing), the log says
so, and tools/demo.py and the slim fine-tune use the same function."""
import pytest

from fsdlite.engine import schedule
from fsdlite.engine.errors import ToolError
from fsdlite.engine.schedule import rescale_schedule
from fsdlite.engine.tool_setup import load_config

SEG = 'configs/segmentation/sparse_segmentor_synthetic.py'  # max_iters = 500: warm-up end 30, cosine T_max 500


@pytest.fixture
def logged(monkeypatch):
    """The lines the rescaler logs."""
    lines = []
    monkeypatch.setattr(schedule, 'print_log', lambda msg, logger=None: lines.append(msg))
    return lines


def schedulers(cfg):
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, cosine.type) == ('LinearLR', 'CosineAnnealingLR')
    return warmup, cosine


@pytest.mark.parametrize('key', ['train_cfg.max_iters', 'max_iters'])
def test_overriding_the_length_rescales_the_schedule_and_logs_it(tools, logged, key):
    cfg = load_config(str(tools.repo / SEG), {key: 40})
    warmup, cosine = schedulers(cfg)
    assert cfg.train_cfg.max_iters == cfg.max_iters == 40
    assert (cosine.T_max, cosine.end, warmup.begin, warmup.end) == (40, 40, 0, 2)  # warm-up keeps its 6 %
    assert logged == ['schedule rescaled from 500 to 40 iterations: train_cfg.max_iters 500 -> 40; param_scheduler.0 '
                      '(LinearLR) end 30 -> 2; param_scheduler.1 (CosineAnnealingLR) end 500 -> 40, T_max 500 -> 40']


def test_an_explicit_scheduler_override_wins(tools, logged):
    cfg = load_config(str(tools.repo / SEG), {'train_cfg.max_iters': 40, 'param_scheduler.1.T_max': 100})
    assert schedulers(cfg)[1].T_max == 100 and schedulers(cfg)[1].end == 40
    assert not any('T_max' in line for line in logged)


def test_no_length_override_changes_nothing(tools, logged):
    cfg = load_config(str(tools.repo / SEG), {'train_dataloader.batch_size': 1})
    assert schedulers(cfg)[1].T_max == 500 and not logged


@pytest.mark.parametrize('options, message', [
    ({'train_cfg.max_iters': 40, 'max_iters': 30},
     '--cfg-options sets train_cfg.max_iters=40 and max_iters=30; expected one of them'),
    ({'max_iters': 0}, 'max_iters=0: expected an integer >= 1'),
    ({'train_cfg.max_iters': 'ten'}, "train_cfg.max_iters='ten': expected an integer >= 1"),
])
def test_bad_length_overrides(tools, options, message):
    with pytest.raises(ToolError, match=message):
        load_config(str(tools.repo / SEG), options)


def test_demo_and_slim_use_the_same_rescaler(tools, logged):
    from mmengine.config import Config

    from fsdlite.slim import finetune
    assert finetune.rescale_schedule is rescale_schedule
    assert tools.load('demo').rescale_schedule is rescale_schedule
    demo_cfg = Config.fromfile(tools.repo / SEG)
    rescale_schedule(demo_cfg, 40)
    assert demo_cfg.param_scheduler == load_config(str(tools.repo / SEG), {'max_iters': 40}).param_scheduler


def test_epoch_based_schedulers_are_left_alone(tools, logged):
    from mmengine.config import Config
    cfg = Config.fromfile(tools.repo / SEG)
    cfg.param_scheduler[0].by_epoch = True
    changes = rescale_schedule(cfg, 1000)
    assert cfg.param_scheduler[0].end == 30 and cfg.param_scheduler[1].T_max == 1000
    assert not any('param_scheduler.0' in c for c in changes)


def test_training_log_says_the_schedule_was_rescaled(trained_work_dir):
    """tools/train.py --cfg-options train_cfg.max_iters=4: the cosine decay ends at iteration 4, and the log says so."""
    _, log = trained_work_dir
    assert 'schedule rescaled from 500 to 4 iterations' in log
    assert '(CosineAnnealingLR) end 500 -> 4, T_max 500 -> 4' in log


def test_hook_iterations_follow_the_schedule(tools, logged, tmp_path):
    """The foreground warm-up of the FSD-lite demo config and a moving average added to it (mmengine's EMAHook
    asserts it starts before the run ends) scale with the run, an explicit hook override wins, and the log says
    so."""
    config = tmp_path / 'fsdlite_ema.py'
    config.write_text(f"_base_ = [{str(tools.repo / 'configs/fsd/fsdlite_synthetic.py')!r}]\n"
                      "custom_hooks = [dict(type='FSDWarmupHook', enable_after_iter=200, threshold_buffer=0.2, "
                      "buffer_iter=200), dict(type='EMAHook', momentum=0.002, begin_iter=300)]\n")
    cfg = load_config(str(config), {'max_iters': 40})
    warmup, ema = cfg.custom_hooks
    assert (warmup.type, warmup.enable_after_iter, warmup.buffer_iter) == ('FSDWarmupHook', 8, 8)  # 200 x 40 / 1000
    assert (ema.type, ema.begin_iter, ema.momentum) == ('EMAHook', 12, 0.002)
    assert 'custom_hooks.1 (EMAHook) begin_iter 300 -> 12' in logged[0]
    cfg = load_config(str(config), {'max_iters': 40, 'custom_hooks.1.begin_iter': 30})
    assert cfg.custom_hooks[1].begin_iter == 30 and cfg.custom_hooks[0].enable_after_iter == 8
