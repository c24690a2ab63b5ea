"""tools/demo.py end to end with a tiny budget: training, held-out evaluation, KITTI frame, PNGs, results."""
import json

import pytest


@pytest.mark.slow
@pytest.mark.parametrize('task', ['det', 'seg'])
def test_demo_smoke(tools, tmp_path, shared_data, task):
    """The default (FSD-lite) and the segmentor demo with a 2-iteration budget."""
    demo = tools.load('demo')
    config = ['--config', tools.seg_config] if task == 'seg' else []
    summary = demo.main(config + ['--out-dir', str(tmp_path), '--max-iters', '2', '--kitti-root',
                                  str(shared_data / 'kitti_object_000008'), '--cfg-options',
                                  'train_dataloader.dataset.num_frames=2', 'test_dataloader.dataset.num_frames=2'])
    names = sorted(p.name for p in tmp_path.glob('*.png'))
    assert names == ['bev_kitti_000008.png', 'bev_synthetic_00.png', 'bev_synthetic_01.png']
    saved = json.loads((tmp_path / 'results.json').read_text())
    assert saved['task'] == summary['task'] == task
    assert saved['max_iters'] == 2 and set(saved['results']) == set(summary['results'])
    kitti = saved['results']['KITTI 000008 (real)']
    if task == 'seg':
        assert 0 <= kitti['acc'] <= 1 and 'IoU_Car' in kitti
    else:  # KITTI 000008 holds cars: their AP is a number in [0, 1]
        assert 0 <= kitti['Car_BEV_AP@0.5'] <= 1 and 'BEV_mAP' in kitti
    assert (tmp_path / 'work' / 'iter_2.pth').is_file()


def test_set_max_iters_stretches_the_schedule(tools):
    from mmengine.config import Config
    demo = tools.load('demo')
    cfg = Config.fromfile(tools.repo / tools.seg_config)
    old = cfg.train_cfg.max_iters
    demo.set_max_iters(cfg, 40)
    assert cfg.train_cfg.max_iters == 40
    cosine = [s for s in cfg.param_scheduler if s.type == 'CosineAnnealingLR'][0]
    assert cosine.T_max == 40 and cosine.end == 40
    warmup = [s for s in cfg.param_scheduler if s.type == 'LinearLR'][0]
    assert warmup.end != old and warmup.end < 40
