"""FSD-lite / FSDv2-lite end to end on hand-made scenes: training lowers the loss, predict returns boxes."""
import pytest
import torch

from fsdlite.models.fsd.fg_sampler import ForegroundPoints
from fsdlite.registry import MODELS


def _train(kit, cfg, iters, warmup=3, seed=0):
    torch.manual_seed(seed)
    model = MODELS.build(cfg)
    data = kit.collate([kit.make_scene(1), kit.make_scene(2)])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    history = []
    for it in range(iters):
        model.runtime_info['fg_mode'] = 'topk' if it < warmup else 'threshold'
        losses = model(**model.data_preprocessor(data, True), mode='loss')
        total = sum(v for k, v in losses.items() if k.startswith('loss'))
        assert torch.isfinite(total)
        opt.zero_grad()
        total.backward()
        opt.step()
        history.append({k: float(v.detach()) for k, v in losses.items()})
    return model, data, history


@pytest.mark.parametrize('name', ['fsd_config', 'fsdv2_config'])
def test_train_lowers_loss_and_predicts(kit, name):
    model, data, history = _train(kit, getattr(kit, name)(), iters=10)
    for key in ('loss_seg', 'loss_vote', 'loss_cls', 'loss_bbox'):
        assert key in history[0]
    first = sum(v for k, v in history[0].items() if k.startswith('loss'))
    last = sum(v for k, v in history[-1].items() if k.startswith('loss'))
    assert last < 0.8 * first, (first, last)
    assert all(h['num_instances'] > 0 for h in history)
    model.eval()
    with torch.no_grad():
        samples = model(**model.data_preprocessor(data, False), mode='predict')
        raw = model(**model.data_preprocessor(data, False), mode='tensor')
    k = raw['cls_logits'].shape[0]
    assert raw['box_codes'].shape == (k, 3, 8) and raw['instance_xyz'].shape == (k, 3)
    assert raw['instance_batch'].shape == (k,) and raw['seg_logits'].shape[1] == 3
    assert len(samples) == 2
    for s in samples:
        pred = s.pred_instances_3d
        n = pred.bboxes_3d.shape[0]
        assert n > 0 and pred.bboxes_3d.shape == (n, 7)
        assert pred.scores_3d.shape == (n,) and pred.labels_3d.shape == (n,)
        assert torch.isfinite(pred.bboxes_3d).all() and (pred.bboxes_3d[:, 3:6] > 0).all()
        assert ((pred.labels_3d >= 0) & (pred.labels_3d < 3)).all()


def test_empty_cloud_and_no_gt(kit):
    torch.manual_seed(0)
    model = MODELS.build(kit.fsd_config())
    empty = kit.make_scene(3, num_objects=0)
    empty['inputs']['points'] = torch.zeros(0, 4)
    empty['data_samples'].gt_pts_seg.pts_semantic_mask = torch.zeros(0, dtype=torch.int64)
    data = kit.collate([empty])
    losses = model(**model.data_preprocessor(data, True), mode='loss')
    assert all(float(v) == 0 for k, v in losses.items() if k.startswith('loss'))
    sum(v for k, v in losses.items() if k.startswith('loss')).backward()
    model.eval()
    samples = model(**model.data_preprocessor(data, False), mode='predict')
    assert samples[0].pred_instances_3d.bboxes_3d.shape == (0, 7)
    # a scene with points but no objects trains (no positives)
    model.train()
    losses = model(**model.data_preprocessor(kit.collate([kit.make_scene(4, num_objects=0)]), True), mode='loss')
    assert torch.isfinite(sum(v for k, v in losses.items() if k.startswith('loss')))


def test_fsdv2_reference_is_mean_of_virtual_points_per_voxel(kit):
    torch.manual_seed(0)
    model = MODELS.build(kit.fsdv2_config()).eval()
    inputs = model.data_preprocessor(kit.collate([kit.make_scene(1)]), False)['inputs']
    with torch.no_grad():
        feats = model.extract_feat(inputs)
        seg = model.seg_head(feats)
        n = inputs['points'].shape[0]
        centre = torch.tensor([[5.1, 0.1, -1.0], [5.3, 0.2, -1.0], [5.6, 0.1, -1.0], [12.2, 3.3, -0.5]])
        point_index = torch.tensor([0, 1, 2, n - 1])
        fg = ForegroundPoints(point_index, torch.tensor([0, 0, 1, 2]), torch.zeros(4, dtype=torch.int64), centre,
                              torch.ones(4), torch.tensor(0))
        inst = model.instances(inputs, feats, seg, fg)
    # virtual voxel size 0.5: (5.1, 0.1) and (5.3, 0.2) share a voxel; the others are alone
    expected = torch.stack([centre[:2].mean(0), centre[2], centre[3]])
    got = inst.xyz[torch.argsort(inst.xyz[:, 0])]
    assert inst.labels is None and inst.feats.shape == (3, model.mixer.out_channels)
    assert torch.allclose(got, expected, atol=1e-6)
    assert inst.batch.tolist() == [0, 0, 0]


def test_config_consistency_errors(kit):
    cfg = kit.fsd_config()
    cfg['bbox_head'] = dict(cfg['bbox_head'], num_classes=2)
    with pytest.raises(ValueError, match='num_classes'):
        MODELS.build(cfg)
    cfg = kit.fsd_config()
    cfg['seg_head'] = dict(cfg['seg_head'], type='PointSegHead')
    with pytest.raises(TypeError, match='VoteSegHead'):
        MODELS.build(cfg)
    cfg = kit.fsd_config()
    cfg['fg_sampler'] = dict(cfg['fg_sampler'], point_range=[0, 0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match='point_range'):
        MODELS.build(cfg)
