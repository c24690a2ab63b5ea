"""ClusterHead: target assignment (class, sample, margin), losses, decoding + NMS; L1 loss."""
import math

import pytest
import torch

from fsdlite.models.fsd.gt import GtBatch, assign_to_boxes, enlarge_boxes
from fsdlite.registry import MODELS

GT = GtBatch(boxes=torch.tensor([[10.0, 0.0, -1.7, 4.0, 2.0, 1.5, 0.0],
                                 [5.0, 5.0, -1.7, 0.8, 0.6, 1.7, 0.0]]),
             labels=torch.tensor([0, 1]), batch=torch.tensor([0, 1]))
REFS = torch.tensor([[10.1, 0.2, -1.0],   # inside car, sample 0
                     [10.1, 0.2, -1.0],   # same place, labelled class 1
                     [10.1, 0.2, -1.0],   # same place, sample 1
                     [12.3, 0.0, -1.0],   # outside the car but within the 0.5 m margin
                     [13.0, 0.0, -1.0],   # outside the margin
                     [5.0, 5.1, -1.0]])   # inside the pedestrian (sample 1)
REF_BATCH = torch.tensor([0, 0, 1, 0, 0, 1])
REF_CLASS = torch.tensor([0, 1, 0, 0, 0, 1])


def _head(class_given=True, **kw):
    torch.manual_seed(0)
    return MODELS.build(dict(type='ClusterHead', in_channels=8, num_classes=3, shared_channels=(16,),
                             class_given=class_given, **kw))


def test_enlarge_and_assign():
    big = enlarge_boxes(GT.boxes, 0.5, 0.25)
    assert torch.allclose(big[0], torch.tensor([10.0, 0.0, -1.95, 5.0, 3.0, 2.0, 0.0]))
    box = assign_to_boxes(REFS, REF_BATCH, GT)
    assert box.tolist() == [0, 0, -1, -1, -1, 1]


def test_targets_class_given():
    head = _head()
    labels, targets = head.get_targets(REFS, REF_BATCH, REF_CLASS, GT)
    assert labels.tolist() == [0, 3, 3, 0, 3, 1]
    pos = labels < 3
    expected = head.coder.encode(GT.boxes[[0, 0, 1]], REFS[pos])
    assert torch.allclose(targets[pos], expected)
    assert (targets[~pos] == 0).all()


def test_targets_class_free():
    labels, _ = _head(class_given=False).get_targets(REFS, REF_BATCH, None, GT)
    assert labels.tolist() == [0, 0, 3, 0, 3, 1]


def test_loss_weights_only_given_class():
    head = _head()
    feats = torch.randn(6, 8)
    cls, reg = head(feats)
    assert cls.shape == (6, 3) and reg.shape == (6, 3, 8)
    losses = head.loss(cls, reg, REFS, REF_BATCH, REF_CLASS, GT)
    assert int(losses['num_pos']) == 3
    # changing logits of classes a cluster does not belong to must not change the loss
    other = cls.detach().clone()
    other[torch.arange(6), (REF_CLASS + 1) % 3] += 5.0
    again = head.loss(other, reg, REFS, REF_BATCH, REF_CLASS, GT)
    assert torch.allclose(losses['loss_cls'], again['loss_cls'])
    # perfect box codes give zero box loss
    labels, targets = head.get_targets(REFS, REF_BATCH, REF_CLASS, GT)
    perfect = reg.detach().clone()
    perfect[torch.arange(6), REF_CLASS] = targets
    assert float(head.loss(cls, perfect, REFS, REF_BATCH, REF_CLASS, GT)['loss_bbox']) == 0.0
    (losses['loss_cls'] + losses['loss_bbox']).backward()
    assert all(p.grad is not None for p in head.parameters())


def test_loss_without_instances_or_gt():
    head = _head()
    cls, reg = head(torch.zeros(0, 8))
    empty_refs = torch.zeros(0, 3)
    losses = head.loss(cls, reg, empty_refs, torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), GT)
    assert float(losses['loss_cls']) == 0.0 and float(losses['loss_bbox']) == 0.0
    no_gt = GtBatch(torch.zeros(0, 7), torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    cls, reg = head(torch.randn(6, 8))
    losses = head.loss(cls, reg, REFS, REF_BATCH, REF_CLASS, no_gt)
    assert int(losses['num_pos']) == 0 and torch.isfinite(losses['loss_cls'])


def test_predict_threshold_nms_and_samples():
    head = _head(class_given=False, test_cfg=dict(score_thr=0.3, nms_iou_thr=0.1))
    refs = torch.tensor([[10.0, 0.0, -1.0], [10.2, 0.0, -1.0], [10.0, 0.0, -1.0], [20.0, 0.0, -1.0]])
    batch = torch.tensor([0, 0, 1, 0])
    logits = torch.full((4, 3), -10.0)
    logits[0, 0], logits[1, 0], logits[2, 0], logits[3, 1] = 2.0, 1.0, 1.5, -2.0  # last one below threshold
    codes = torch.zeros(4, 3, 8)
    codes[..., 3:6] = math.log(2.0)
    codes[..., 7] = 1.0
    sel = head.select(logits, codes, refs, batch)
    keep = head.nms(sel['boxes'], sel['scores'], sel['labels'], sel['batch'])
    boxes, scores, labels, out_batch = (sel[k][keep] for k in ('boxes', 'scores', 'labels', 'batch'))
    # box 1 overlaps box 0 (same sample, same class) -> suppressed; box 2 is in another sample
    assert out_batch.tolist() == [0, 1]
    assert torch.allclose(scores, torch.sigmoid(torch.tensor([2.0, 1.5])))
    assert labels.tolist() == [0, 0]
    assert torch.allclose(boxes[0], torch.tensor([10.0, 0.0, -2.0, 2.0, 2.0, 2.0, 0.0]), atol=1e-6)


def test_invalid_config_and_missing_class():
    with pytest.raises(ValueError, match='code_weights'):
        _head(code_weights=[1.0] * 7)
    head = _head()
    with pytest.raises(ValueError, match='ref_class'):
        head.get_targets(REFS, REF_BATCH, None, GT)


def test_l1_loss():
    loss = MODELS.build(dict(type='L1Loss', loss_weight=2.0))
    pred, target = torch.tensor([[1.0, 2.0], [0.0, -1.0]]), torch.tensor([[0.0, 2.0], [1.0, 1.0]])
    assert float(loss(pred, target)) == pytest.approx(2.0 * 4.0 / 4)
    weight = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    assert float(loss(pred, target, weight, avg_factor=2.0)) == pytest.approx(2.0 * 1.0 / 2)
    with pytest.raises(ValueError, match='one shape'):
        loss(pred, target[:1])
    with pytest.raises(ValueError, match='reduction'):
        MODELS.build(dict(type='L1Loss', reduction='max'))
