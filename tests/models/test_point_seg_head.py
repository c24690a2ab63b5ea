"""PointSegHead: outputs, thresholds, ignore index, loss normalisation, bad arguments."""
import pytest
import torch

from fsdlite.models.lidar import PointSegHead
from fsdlite.models.losses.focal_loss import SigmoidFocalLoss


def test_forward_shapes():
    head = PointSegHead(7, 3, hidden_channels=(16, 8))
    out = head(torch.randn(5, 7))
    assert out['seg_logits'].shape == (5, 3) and out['seg_feats'].shape == (5, 8)
    assert PointSegHead(7, 3, hidden_channels=())(torch.randn(5, 7))['seg_feats'].shape == (5, 7)


def test_predict_thresholds_per_class():
    head = PointSegHead(4, 3, score_thr=(0.5, 0.3, 0.9))
    logits = torch.logit(torch.tensor([[0.6, 0.1, 0.2], [0.1, 0.35, 0.2], [0.1, 0.2, 0.8], [0.4, 0.2, 0.1]]))
    pred = head.predict(dict(seg_logits=logits))
    assert pred['labels'].tolist() == [0, 1, 3, 3]
    assert torch.allclose(pred['scores'], logits.sigmoid())
    empty = head.predict(dict(seg_logits=torch.zeros(0, 3)))
    assert empty['labels'].shape == (0,) and empty['scores'].shape == (0, 3)


def test_loss_is_averaged_over_foreground_and_skips_ignored():
    head = PointSegHead(4, 2, ignore_index=-1, loss_seg=dict(type='SigmoidFocalLoss', gamma=2.0, alpha=0.25))
    logits = torch.randn(5, 2)
    labels = torch.tensor([0, 2, 1, -1, 2])
    loss = head.loss(dict(seg_logits=logits), head.get_targets(labels))['loss_seg']
    elem = SigmoidFocalLoss(gamma=2.0, alpha=0.25, reduction='none')(logits[[0, 1, 2, 4]], labels[[0, 1, 2, 4]])
    assert torch.allclose(loss, elem.sum() / 2)
    all_bg = head.loss(dict(seg_logits=logits[:2]), dict(labels=torch.tensor([2, 2])))['loss_seg']
    assert torch.isfinite(all_bg)  # no foreground: divided by 1, not 0


def test_bad_arguments():
    with pytest.raises(ValueError, match='num_classes'):
        PointSegHead(4, 0)
    with pytest.raises(ValueError, match='score_thr'):
        PointSegHead(4, 3, score_thr=(0.5, 0.5))
    with pytest.raises(ValueError, match='ignore_index'):
        PointSegHead(4, 3, ignore_index=3)
    head = PointSegHead(4, 3)
    with pytest.raises(ValueError, match=r'point labels must be in \[0, 3\]'):
        head.get_targets(torch.tensor([0, 5]))


def test_predict_score_equal_to_threshold_is_foreground():
    # documented: the best class is kept when its score *reaches* the threshold (>=)
    head = PointSegHead(4, 2, score_thr=0.5)
    logits = torch.tensor([[0.0, -3.0], [-3.0, 0.0], [-0.01, -3.0]])  # sigmoid(0) == 0.5 exactly
    assert logits.sigmoid()[0, 0].item() == 0.5
    assert head.predict(dict(seg_logits=logits))['labels'].tolist() == [0, 1, 2]
    ones = PointSegHead(4, 2, score_thr=(1.0, 1.0))
    big = torch.tensor([[40.0, -3.0], [3.0, -3.0]])  # sigmoid(40) == 1.0 in float32
    assert big.sigmoid()[0, 0].item() == 1.0
    assert ones.predict(dict(seg_logits=big))['labels'].tolist() == [0, 2]
