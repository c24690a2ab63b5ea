"""The VoxelNet config end to end at tiny sizes: dataset -> preprocessor -> loss / predict -> metric -> Runner."""
import copy

import pytest
import torch
from mmengine.dataset import pseudo_collate

from fsdlite.registry import DATASETS, METRICS

TINY = dict(grid_shape=(3, 3, 2), num_muons=50, muons_per_voxel=30, voxel_size=0.3)  # V=18 >= k_voxel, 30 >= k_muon


@pytest.fixture(scope='module')
def batch(voxelnet_cfg):
    ds = DATASETS.build(dict(voxelnet_cfg.train_dataloader.dataset, num_volumes=2, **TINY))
    return pseudo_collate([ds[0], ds[1]]), ds.metainfo


def test_loss_predict_and_metric(build_voxelnet, batch):
    data, metainfo = batch
    model = build_voxelnet(dtype=torch.float32)
    model.train()
    processed = model.data_preprocessor(copy.deepcopy(data), True)
    feats = processed['inputs']['muon_features']
    assert feats.shape == (2, 18, 30, 9)
    feats.requires_grad_(True)
    losses = model(processed['inputs'], processed['data_samples'], mode='loss')
    assert set(losses) == {'loss_cls'} and torch.isfinite(losses['loss_cls'])
    losses['loss_cls'].backward()
    assert feats.grad.abs().sum() > 0                                   # differentiable w.r.t. the inputs
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    model.eval()
    with torch.no_grad():
        samples = model(processed['inputs'], processed['data_samples'], mode='predict')
    assert samples[0].pred_pts_seg.pts_scores.shape == (18, 5)
    metric = METRICS.build(dict(type='VoxelMaterialMetric'))
    metric.dataset_meta = metainfo
    metric.process(data, samples)
    result = metric.evaluate(2)
    assert {'voxel/accuracy', 'voxel/block_auc', 'voxel/baseline_block_auc'} <= set(result)
    assert 0 <= result['voxel/accuracy'] <= 1


def test_x0_head_variant(build_voxelnet, batch):
    data, metainfo = batch
    model = build_voxelnet(dtype=torch.float32, head=dict(type='VoxelX0Head', attn_channels=20))
    processed = model.data_preprocessor(copy.deepcopy(data), True)
    losses = model(processed['inputs'], processed['data_samples'], mode='loss')
    assert set(losses) == {'loss_x0'} and torch.isfinite(losses['loss_x0'])
    with torch.no_grad():
        samples = model(processed['inputs'], processed['data_samples'], mode='predict')
    metric = METRICS.build(dict(type='VoxelMaterialMetric', classes=metainfo['classes']))
    metric.process(data, samples)
    assert 0 <= metric.evaluate(2)['voxel/accuracy'] <= 1


@pytest.mark.slow
def test_runner_trains_and_validates(voxelnet_cfg, tmp_path):
    from mmengine.runner import Runner
    cfg = copy.deepcopy(voxelnet_cfg)
    cfg.work_dir = str(tmp_path)
    cfg.train_dataloader.dataset.update(num_volumes=4, **TINY)
    cfg.train_dataloader.batch_size = 2
    cfg.val_dataloader.dataset.update(num_volumes=2, **TINY)
    cfg.train_cfg.update(max_iters=2, val_interval=2)
    cfg.param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=False)]
    cfg.default_hooks.logger.interval = 1
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.iter == 2
    assert (tmp_path / 'iter_2.pth').is_file()
    metrics = runner.val_loop.run()
    assert 'voxel/block_auc' in metrics
