"""KPDataPreprocessor pyramids, blocks, KPEncoder/KPDecoder, KPCNN and KPFCNN (modes, configs, training)."""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import pseudo_collate
from mmengine.logging import MMLogger

from fsdlite.datasets.point_shapes import PointShapesDataset, PrimitiveScenesDataset
from fsdlite.models.kpconv.data_preprocessor import KPDataPreprocessor
from fsdlite.models.kpconv.kp_models import KPCNN, KPFCNN
from fsdlite.registry import MODELS

CONFIG_DIR = Path(__file__).resolve().parents[3] / 'configs' / 'kpconv'


def encoder(conv='KPConv', channels=(16, 32, 64), blocks=(1, 2, 1), **kwargs):
    return dict(type='KPEncoder', in_channels=1, channels=channels, blocks=blocks, conv_types=(conv,) * len(channels),
                first_subsampling_dl=0.1, conv_radius=2.5, conv_defaults=dict(kernel_size=7), **kwargs)


def test_pyramid_neighbourhoods_are_radius_neighbours_within_each_sample(shape_batch):
    prep = KPDataPreprocessor(first_subsampling_dl=0.1, num_levels=3, max_neighbors=40)
    pyr = prep(shape_batch)['inputs']
    assert pyr.batch_size == 6 and pyr.num_levels == 3
    assert pyr.features.shape == (len(pyr.points[0]), 1) and torch.all(pyr.features == 1)
    assert [len(p) for p in pyr.points] == sorted((len(p) for p in pyr.points), reverse=True)
    for level in range(3):
        pts, batch, nb = pyr.points[level], pyr.batch[level], pyr.neighbors[level]
        n = len(pts)
        valid = nb < n
        j = nb.clamp(max=n - 1)
        dist = (pts[j] - pts[:, None]).norm(dim=-1)
        assert torch.all(dist[valid] < prep.radius(level) + 1e-6)
        assert torch.all(batch[j][valid] == batch[:, None].expand_as(nb)[valid])  # never across samples
        d = torch.where(valid, dist, torch.full_like(dist, float('inf')))
        assert torch.all(d[:, 1:] >= d[:, :-1])  # nearest first, shadows last
        assert torch.all(nb[:, 0] == torch.arange(n))  # every point is its own nearest neighbour
        assert nb.shape[1] == int(prep.neighbor_limits[level]) >= 1
    for level in range(2):
        pool, up = pyr.pools[level], pyr.upsamples[level]
        assert pool.shape[0] == len(pyr.points[level + 1]) and up.shape == (len(pyr.points[level]), 1)
        fine, coarse = pyr.points[level], pyr.points[level + 1]
        dist = torch.cdist(fine, coarse) + (pyr.batch[level][:, None] != pyr.batch[level + 1][None]) * 1e3
        found = up[:, 0] < len(coarse)
        assert torch.all(up[found, 0] == dist[found].argmin(1))  # the closest coarse point
    assert pyr.cells.shape == (sum(pyr.num_points),) and int(pyr.cells.max()) < len(pyr.points[0])


def test_neighbour_limits_calibrated_once_and_truncation_counted(shape_batch):
    prep = KPDataPreprocessor(first_subsampling_dl=0.1, num_levels=2, calibration_quantile=0.5)
    pyr = prep(shape_batch)['inputs']
    limits = prep.neighbor_limits.tolist()
    assert all(h >= 1 for h in limits) and pyr.truncated[0] > 0  # a median limit truncates about half
    pyr2 = prep(shape_batch)['inputs']
    assert prep.neighbor_limits.tolist() == limits and pyr2.truncated == pyr.truncated
    fixed = KPDataPreprocessor(first_subsampling_dl=0.1, num_levels=2, neighbor_limits=[64, 64], max_neighbors=64)
    assert fixed(shape_batch)['inputs'].truncated == [0, 0]


@pytest.mark.parametrize('kwargs,match', [
    (dict(first_subsampling_dl=0.0), 'first_subsampling_dl'),
    (dict(first_subsampling_dl=0.1, feature_mode='rgb'), 'feature_mode'),
    (dict(first_subsampling_dl=0.1, num_levels=2, neighbor_limits=[4]), 'neighbor_limits'),
    (dict(first_subsampling_dl=0.1, num_levels=2, neighbor_limits=[4, 0]), 'neighbor_limits'),
])
def test_preprocessor_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KPDataPreprocessor(**kwargs)


def test_preprocessor_rejects_bad_points():
    prep = KPDataPreprocessor(first_subsampling_dl=0.1, num_levels=1)
    with pytest.raises(ValueError, match=r'points\[0\]'):
        prep(dict(inputs=dict(points=[torch.zeros(5, 2)]), data_samples=None))


@pytest.mark.parametrize('conv', ['KPConv', 'KPConvD', 'KPConvX', 'KPInv'])
def test_kpcnn_modes(conv, shape_batch):
    torch.manual_seed(0)
    model = KPCNN(num_classes=6, backbone=encoder(conv), head_channels=(16,),
                  data_preprocessor=dict(type='KPDataPreprocessor'))
    assert model.data_preprocessor.num_levels == 3 and model.data_preprocessor.first_subsampling_dl == 0.1
    batch = model.data_preprocessor(shape_batch, True)
    losses = model(**batch, mode='loss')
    assert set(losses) == {'loss_cls', 'acc', 'truncated_neighbors'} and torch.isfinite(losses['loss_cls'])
    losses['loss_cls'].backward()
    assert all(p.grad is not None for p in model.parameters())
    assert model(**batch, mode='tensor').shape == (6, 6)
    model.eval()
    samples = model(**model.data_preprocessor(shape_batch), mode='predict')
    assert len(samples) == 6 and all(s.pred_scores.shape == (6,) and 0 <= int(s.pred_label) < 6 for s in samples)
    torch.testing.assert_close(torch.stack([s.pred_scores.sum() for s in samples]), torch.ones(6))


def test_kpfcnn_predicts_every_input_point():
    ds = PrimitiveScenesDataset(num_samples=2, extent=1.0, point_density=150.0)
    data = pseudo_collate([ds[0], ds[1]])
    torch.manual_seed(0)
    model = KPFCNN(num_classes=6, backbone=encoder('KPInv', blocks=(1, 1, 1)),
                   data_preprocessor=dict(type='KPDataPreprocessor'))
    batch = model.data_preprocessor(data, True)
    pyr = batch['inputs']
    assert pyr.labels.shape == (len(pyr.points[0]),)
    raw = torch.cat([data['data_samples'][i].gt_pts_seg.pts_semantic_mask for i in range(2)])
    assert (pyr.labels[pyr.cells] == raw).float().mean() > 0.9  # cells map raw points to their level-0 row
    raw_xyz = torch.cat([p[:, :3] for p in data['inputs']['points']])
    assert (pyr.points[0][pyr.cells] - raw_xyz).abs().max() < 0.1 * 3 ** 0.5  # ... inside the same 0.1 m cell
    losses = model(**batch, mode='loss')
    assert torch.isfinite(losses['loss_seg'])
    losses['loss_seg'].backward()
    model.eval()
    samples = model(**model.data_preprocessor(data), mode='predict')
    for sample, item in zip(samples, (ds[0], ds[1])):
        n = len(item['inputs']['points'])
        assert sample.pred_pts_seg.pts_semantic_mask.shape == (n,) and sample.pred_pts_seg.pts_scores.shape == (n, 6)
    unlabelled = dict(inputs=data['inputs'], data_samples=None)
    with pytest.raises(ValueError, match='labels'):
        model.loss(model.data_preprocessor(unlabelled)['inputs'])


def test_deformable_stage_adds_regulariser_loss(shape_batch):
    torch.manual_seed(0)
    deform = dict(type='KPConv', deformable=True)
    model = KPCNN(num_classes=6, backbone=encoder(deform, channels=(16, 32), blocks=(1, 2)), head_channels=(),
                  data_preprocessor=dict(type='KPDataPreprocessor'), deform_fitting_power=0.5)
    losses = model(**model.data_preprocessor(shape_batch, True), mode='loss')
    assert losses['loss_deform'] > 0


def test_tensorflow_style_momentum_warns():
    logger = MMLogger.get_current_instance()
    with _capture(logger) as records:
        MODELS.build(encoder(norm_cfg=dict(type='BN1d', momentum=0.98)))
    assert any('momentum=0.98' in r for r in records)


class _capture:
    """Collect the messages the mmengine logger emits inside the block."""

    def __init__(self, logger):
        self.logger, self.records = logger, []

    def __enter__(self):
        import logging

        class Handler(logging.Handler):
            def emit(inner, record):  # noqa: N805
                self.records.append(record.getMessage())

        self.handler = Handler()
        self.logger.addHandler(self.handler)
        return self.records

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)


@pytest.mark.parametrize('name', sorted(p.name for p in CONFIG_DIR.glob('*.py')))
def test_configs_build_and_run_one_step(name):
    cfg = Config.fromfile(CONFIG_DIR / name)
    assert cfg.default_scope == 'fsdlite'
    model = MODELS.build(cfg.model)
    data_cfg = dict(cfg.train_dataloader.dataset)
    data_cfg['num_samples'] = 2
    if data_cfg['type'] == 'PrimitiveScenesDataset':
        data_cfg.update(extent=1.0, point_density=100.0)
    from fsdlite.registry import DATASETS
    ds = DATASETS.build(data_cfg)
    losses = model(**model.data_preprocessor(pseudo_collate([ds[0], ds[1]]), True), mode='loss')
    assert all(torch.isfinite(v) for v in losses.values())


@pytest.mark.slow
def test_kpcnn_learns_to_separate_shapes():
    """A few optimiser steps on 12 shapes lower the training loss markedly (fused KPInv)."""
    ds = PointShapesDataset(num_samples=12, num_points=(300, 400), seed=5)
    data = pseudo_collate([ds[i] for i in range(12)])
    torch.manual_seed(0)
    model = KPCNN(num_classes=6, backbone=encoder('KPInv', channels=(16, 32)[:2], blocks=(1, 1)), head_channels=(32,),
                  data_preprocessor=dict(type='KPDataPreprocessor'))
    batch = model.data_preprocessor(data, True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(30):
        opt.zero_grad()
        loss = model(**batch, mode='loss')['loss_cls']
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.5 * first
