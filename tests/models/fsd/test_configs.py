"""The FSD-lite / FSDv2-lite configs build, share their first stage, and train + evaluate through the Runner."""
from pathlib import Path

import pytest
from mmengine.config import Config

from fsdlite.registry import MODELS

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = {'configs/fsd/fsdlite_synthetic.py': 'FSDLite', 'configs/fsd/fsdlite_kitti.py': 'FSDLite',
           'configs/fsdv2/fsdv2lite_synthetic.py': 'FSDv2Lite', 'configs/fsdv2/fsdv2lite_kitti.py': 'FSDv2Lite'}


@pytest.mark.parametrize('path', sorted(CONFIGS))
def test_config_builds(path):
    cfg = Config.fromfile(ROOT / path)
    model = MODELS.build(cfg.model)
    assert type(model).__name__ == CONFIGS[path]
    assert model.point_range == (0.0, -40.0, -3.0, 70.4, 40.0, 1.0)
    assert model.fg_sampler.point_range == list(model.point_range)
    assert model.num_classes == 3 and model.bbox_head.num_classes == 3
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 5e6
    assert cfg.val_evaluator['type'] == 'DetMetric'
    assert any(h['type'] == 'FSDWarmupHook' for h in cfg.custom_hooks)
    assert cfg.train_cfg['val_interval'] == cfg.train_cfg['max_iters']  # evaluation at the end


def test_both_detectors_share_the_first_stage():
    v1 = Config.fromfile(ROOT / 'configs/fsd/fsdlite_synthetic.py').model
    v2 = Config.fromfile(ROOT / 'configs/fsdv2/fsdv2lite_synthetic.py').model
    for key in ('voxel_size', 'voxel_encoder', 'backbone', 'neck', 'seg_head', 'fg_sampler'):
        assert v1[key] == v2[key], key


@pytest.mark.slow
def test_runner_trains_with_warmup_hook_and_evaluates(shared_data, tmp_path):
    from mmengine.runner import Runner

    cfg = Config.fromfile(ROOT / 'configs/fsd/fsdlite_kitti.py')
    cfg.data_root = str(shared_data / 'kitti_object_000008')
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[loader]['dataset']['data_root'] = cfg.data_root
    cfg.work_dir = str(tmp_path)
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=3, val_interval=3)
    cfg.custom_hooks = [dict(type='FSDWarmupHook', enable_after_iter=2, threshold_buffer=0.2, buffer_iter=10)]
    cfg.default_hooks['checkpoint']['interval'] = 3
    cfg.default_hooks['logger']['interval'] = 1
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.model.runtime_info['fg_mode'] == 'threshold'
    assert runner.model.runtime_info['threshold_offset'] == pytest.approx(0.2)  # iteration 2: buffer just starts
    metrics = runner.val_loop.run()
    assert 'det/Car_BEV_AP@0.5' in metrics and 0.0 <= metrics['det/Car_BEV_AP@0.5'] <= 1.0
    assert (tmp_path / 'iter_3.pth').is_file()
