"""SparseSegmentor built from the real configs: preprocessor + loss + predict on tiny inputs."""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

from fsdlite.registry import MODELS

REPO = Path(__file__).resolve().parents[2]
MODEL_CONFIGS = [REPO / 'configs/_base_/models/sparse_segmentor.py']
SEG_CONFIGS = sorted((REPO / 'configs/segmentation').glob('*.py'))


def _small(model_cfg):
    """The config's model, with narrower UNet stages to keep the test fast (same structure)."""
    cfg = Config(dict(model=model_cfg)).model
    enc = cfg.backbone.encoder_channels
    cfg.backbone.base_channels = 8
    cfg.backbone.encoder_channels = tuple(tuple(8 for _ in stage) for stage in enc)
    cfg.backbone.decoder_channels = tuple((8, 8, 8) for _ in enc)
    return cfg


@pytest.fixture(params=[str(p.relative_to(REPO)) for p in MODEL_CONFIGS + SEG_CONFIGS])
def model_cfg(request):
    return Config.fromfile(REPO / request.param).model


def test_config_builds_full_size_model(model_cfg):
    model = MODELS.build(model_cfg)
    assert model.backbone.in_channels == model.voxel_encoder.out_channels
    assert model.seg_head.shared[0].in_channels == model.neck.out_channels
    assert model.data_preprocessor.voxel_size == tuple(model_cfg.voxel_size)


def test_loss_and_predict(model_cfg, lidar):
    torch.manual_seed(0)
    model = MODELS.build(_small(model_cfg))
    pr = model.data_preprocessor.point_range
    batch = lidar.collate([lidar.random_scene(400, 0, point_range=pr),
                           lidar.random_scene(300, 1, with_box=False, point_range=pr)])
    data = model.data_preprocessor(batch, True)
    losses = model(**data, mode='loss')
    assert set(losses) == {'loss_seg'} and torch.isfinite(losses['loss_seg']) and losses['loss_seg'] > 0
    losses['loss_seg'].backward()
    assert all(p.grad is not None for p in model.parameters())
    model.eval()
    with torch.no_grad():
        samples = model(**model.data_preprocessor(batch, False), mode='predict')
        raw = model(**model.data_preprocessor(batch, False), mode='tensor')
    for sample, n in zip(samples, (400, 300)):
        mask, scores = sample.pred_pts_seg.pts_semantic_mask, sample.pred_pts_seg.pts_scores
        assert mask.shape == (n,) and scores.shape == (n, model.num_classes)
        assert ((mask >= 0) & (mask <= model.num_classes)).all()
        assert ((scores >= 0) & (scores <= 1)).all()
    assert raw['seg_logits'].shape == (data['inputs']['points'].shape[0], model.num_classes)


def test_excluded_and_empty_inputs(model_cfg, lidar):
    model = MODELS.build(_small(model_cfg))
    pr = model.data_preprocessor.point_range
    points, sample = lidar.random_scene(200, 2, point_range=pr)
    points[:5, 0] = pr[3] + 10.0           # out of range
    points[5:8, 3] = float('nan')          # non-finite feature
    empty = lidar.make_sample(torch.zeros(0, 4))
    batch = lidar.collate([(points, sample), empty])
    losses = model(**model.data_preprocessor(batch, True), mode='loss')
    assert torch.isfinite(losses['loss_seg'])
    model.eval()
    with torch.no_grad():
        out = model(**model.data_preprocessor(batch, False), mode='predict')
    assert (out[0].pred_pts_seg.pts_semantic_mask[:8] == model.num_classes).all()  # excluded -> background
    assert (out[0].pred_pts_seg.pts_scores[:8] == 0).all()
    from fsdlite.ops.voxelize.reference import voxelize_reference
    clean = torch.nan_to_num(points[:, :3], nan=0.0)
    outside_grid = int((voxelize_reference(clean, model.data_preprocessor.voxel_size, pr)[1][8:] < 0).sum())
    assert out[0].metainfo['num_excluded_points'] == 8 + outside_grid  # + points the grid rounding leaves out
    assert out[1].pred_pts_seg.pts_semantic_mask.shape == (0,)
    # A batch without any voxel: zero loss connected to every parameter, background predictions.
    model.train()
    only_empty = lidar.collate([lidar.make_sample(torch.zeros(0, 4))])
    zero = model(**model.data_preprocessor(only_empty, True), mode='loss')['loss_seg']
    zero.backward()
    assert zero.item() == 0 and all(p.grad is not None for p in model.parameters())
    assert model(**model.data_preprocessor(only_empty, False), mode='tensor') is None


def test_training_steps_reduce_the_loss(lidar):
    torch.manual_seed(0)
    cfg = _small(Config.fromfile(MODEL_CONFIGS[0]).model)
    model = MODELS.build(cfg)
    pr = model.data_preprocessor.point_range
    batch = lidar.collate([lidar.random_scene(300, 5, point_range=pr)])
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        loss = model(**model.data_preprocessor(batch, True), mode='loss')['loss_seg']
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_bad_mode_and_missing_labels(lidar):
    model = MODELS.build(_small(Config.fromfile(MODEL_CONFIGS[0]).model))
    pr = model.data_preprocessor.point_range
    points, sample = lidar.random_scene(50, 0, point_range=pr)
    data = model.data_preprocessor(lidar.collate([(points, sample)]), True)
    with pytest.raises(ValueError, match='mode must be one of'):
        model(**data, mode='train')
    with pytest.raises(ValueError, match="needs data_samples"):
        model(data['inputs'], None, mode='loss')
    del sample.gt_pts_seg
    with pytest.raises(KeyError, match='gt_pts_seg'):
        model(data['inputs'], [sample], mode='loss')
    short = lidar.make_sample(points[:10])[1]
    with pytest.raises(ValueError, match=r'expected \(50,\)'):
        model(data['inputs'], [short], mode='loss')
