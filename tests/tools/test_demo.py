"""tools/demo.py end to end with a tiny budget: training, held-out evaluation, KITTI frame, PNGs, results."""
import json
import types

import pytest
import torch


@pytest.mark.slow
@pytest.mark.parametrize('task', ['det', 'seg'])
def test_demo_smoke(tools, tmp_path, shared_data, task):
    """The default (FSD-lite) and the segmentor demo with a 3-iteration budget: training with validations, the 30
    real KITTI frames (../shared/data/kitti_tiny_3d), pictures, curves and results."""
    demo = tools.load('demo')
    config = ['--config', tools.seg_config] if task == 'seg' else []
    summary = demo.main(config + ['--out-dir', str(tmp_path), '--max-iters', '3', '--kitti-root',
                                  str(shared_data / 'kitti_tiny_3d'), '--cfg-options',
                                  'train_dataloader.dataset.num_frames=2', 'val_dataloader.dataset.num_frames=2'])
    names = sorted(p.name for p in tmp_path.glob('*.png'))
    # the two real frames with the most labelled targets (000010: 9, 000021: 7)
    assert names == ['bev_kitti_000010.png', 'bev_kitti_000021.png', 'bev_synthetic_00.png', 'bev_synthetic_01.png',
                     'training_curves.png']
    saved = json.loads((tmp_path / 'results.json').read_text())
    assert saved['task'] == summary['task'] == task
    assert saved['max_iters'] == 3 and set(saved['results']) == set(summary['results'])
    # neither demo config averages its weights (no EMAHook): the real frames are scored with the last iteration's
    assert saved['averaged_weights'] is False
    simulated, real = (saved['results'][k] for k in sorted(saved['results'], key=lambda k: not k.startswith('sim')))
    if task == 'seg':
        assert 0 <= real['acc'] <= 1 and 'IoU_Car' in real and 'IoU_Car' in simulated
    else:  # the real frames hold 36 moderate cars: their AP is a number in [0, 1]
        assert 0 <= real['Car_BEV_AP@0.5'] <= 1 and real['Car_num_gt'] == 36 and 'BEV_mAP' in simulated
    assert (tmp_path / 'work' / 'iter_3.pth').is_file()


def test_one_thread_while_the_worker_simulates(tools):
    """The demo trains on one thread during the first pass over the training frames (the data worker simulates them
    on the other core) and on ``threads`` once the worker only replays its cache."""
    demo = tools.load('demo')
    hook, before = demo.ThreadsAfterSimulation(first_pass_iters=300, threads=2), torch.get_num_threads()
    try:
        seen = []
        for it in (0, 299, 300, 1199):
            hook.before_train_iter(types.SimpleNamespace(iter=it), it)
            seen.append(torch.get_num_threads())
        assert seen == [1, 1, 2, 2]
    finally:
        torch.set_num_threads(before)
