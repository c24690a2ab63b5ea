"""VoxelNet on a GPU: training steps lower the loss, predictions and the CPU agree (float64, same weights), and the
fixed-shape form (``impl='dense'``: every graph of a batch at once) equals the chunked dynamic one
(``'efficient'``) there. ``cuda`` tests: skipped without a GPU unless FSDLITE_TEST_GPU_DEVICE names another
device."""
import copy

import pytest
import torch
from mmengine.dataset import pseudo_collate

from fsdlite.registry import DATASETS

pytestmark = pytest.mark.cuda
TINY = dict(grid_shape=(3, 3, 2), num_muons=50, muons_per_voxel=30, voxel_size=0.3)


@pytest.fixture(scope='module')
def data(voxelnet_cfg):
    ds = DATASETS.build(dict(voxelnet_cfg.train_dataloader.dataset, num_volumes=2, **TINY))
    return pseudo_collate([ds[0], ds[1]])


def preprocess(model, data, training):
    out = model.data_preprocessor(copy.deepcopy(data), training)
    dtype = next(model.parameters()).dtype
    out['inputs'] = {k: v.to(dtype) if v.is_floating_point() else v for k, v in out['inputs'].items()}
    return out


def test_training_steps_lower_the_loss(build_voxelnet, data, gpu):
    model = build_voxelnet(dtype=torch.float32).to(gpu).train()
    optim = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(6):
        loss = model(**preprocess(model, data, True), mode='loss')['loss_cls']
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses


def test_predict_and_the_cpu_agree(build_voxelnet, data, gpu):
    cpu_model = build_voxelnet(seed=1)
    gpu_model = copy.deepcopy(cpu_model).to(gpu)
    results = []
    for model in (cpu_model, gpu_model):
        model.train()
        model.zero_grad()
        loss = model(**preprocess(model, data, True), mode='loss')['loss_cls']
        loss.backward()
        model.eval()
        with torch.no_grad():
            batch = preprocess(model, data, False)
            raw = model(batch['inputs'], mode='tensor')
            samples = model(**batch, mode='predict')
        results.append((loss.item(), [p.grad.cpu() for p in model.parameters() if p.grad is not None], raw.cpu(),
                        samples))
    (loss_c, grads_c, raw_c, pred_c), (loss_g, grads_g, raw_g, pred_g) = results
    assert loss_g == pytest.approx(loss_c, rel=1e-9)
    assert len(grads_c) == len(grads_g)
    for a, b in zip(grads_c, grads_g):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(raw_g, raw_c, rtol=1e-9, atol=1e-9)
    for a, b in zip(pred_c, pred_g):
        torch.testing.assert_close(b.pred_pts_seg.pts_scores.cpu(), a.pred_pts_seg.pts_scores, rtol=1e-9, atol=1e-9)


def test_fixed_shape_equals_dynamic(build_voxelnet, data, gpu):
    model = build_voxelnet(seed=2, chunk_rows=64).to(gpu).eval()
    batch = preprocess(model, data, False)['inputs']
    outs = {}
    for impl in ('dense', 'efficient'):
        model.impl = impl
        with torch.no_grad():
            outs[impl] = model(batch, mode='tensor')
    assert outs['dense'].device.type == gpu.type
    torch.testing.assert_close(outs['efficient'], outs['dense'], rtol=1e-10, atol=1e-12)
