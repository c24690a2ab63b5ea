"""VoteSegHead targets from box membership and its losses; GT collation."""
import pytest
import torch

from fsdlite.models.fsd.coders import encode_vote
from fsdlite.models.fsd.gt import GtBatch, collect_gt, point_targets
from fsdlite.registry import MODELS
from fsdlite.structures import Det3DDataSample, InstanceData

GT = GtBatch(boxes=torch.tensor([[10.0, 0.0, -1.7, 4.0, 2.0, 1.6, 0.0],
                                 [5.0, 5.0, -1.7, 0.8, 0.6, 1.7, 0.0]]),
             labels=torch.tensor([0, 1]), batch=torch.tensor([0, 1]))
POINTS = torch.tensor([[11.0, 0.5, -1.5, 0.3],   # in the car
                       [5.1, 5.1, -1.0, 0.1],    # pedestrian's place, but sample 0 -> background
                       [5.1, 5.1, -1.0, 0.2],    # in the pedestrian (sample 1)
                       [0.0, 0.0, -1.7, 0.0]])   # background
BATCH = torch.tensor([0, 0, 1, 1])


def _head():
    torch.manual_seed(0)
    return MODELS.build(dict(type='VoteSegHead', in_channels=6, num_classes=3, hidden_channels=(8,)))


def test_point_targets():
    labels, offsets = point_targets(POINTS[:, :3], BATCH, GT, 3)
    assert labels.tolist() == [0, 3, 1, 3]
    assert torch.allclose(offsets[0], torch.tensor([-1.0, -0.5, -1.7 + 0.8 + 1.5]))
    assert torch.allclose(offsets[2], torch.tensor([-0.1, -0.1, -1.7 + 0.85 + 1.0]))
    assert (offsets[[1, 3]] == 0).all()


def test_head_outputs_targets_and_losses():
    head = _head()
    out = head(torch.randn(4, 6))
    assert out['seg_logits'].shape == (4, 3) and out['vote_codes'].shape == (4, 3, 3)
    targets = head.get_targets(points=POINTS, batch=BATCH, gt=GT)
    labels, offsets = point_targets(POINTS[:, :3], BATCH, GT, 3)
    assert torch.equal(targets['labels'], labels)
    assert torch.allclose(targets['vote_targets'], encode_vote(offsets))
    losses = head.loss(out, targets)
    expected_vote = ((out['vote_codes'][0, 0] - targets['vote_targets'][0]).abs().sum()
                     + (out['vote_codes'][2, 1] - targets['vote_targets'][2]).abs().sum()) / 6
    assert torch.allclose(losses['loss_vote'], expected_vote)
    assert losses['loss_seg'] > 0
    # background points and other classes' vote channels do not matter
    out2 = {k: v.detach().clone() for k, v in out.items()}
    out2['vote_codes'][[1, 3]] += 10
    out2['vote_codes'][0, 1] += 10
    assert torch.allclose(head.loss(out2, targets)['loss_vote'], expected_vote)


def test_collect_gt_and_invalid():
    samples = []
    for boxes, labels in ((GT.boxes[:1], [0]), (torch.zeros(0, 7), []), (GT.boxes[1:], [1])):
        s = Det3DDataSample()
        s.gt_instances_3d = InstanceData(bboxes_3d=boxes, labels_3d=torch.tensor(labels, dtype=torch.int64))
        samples.append(s)
    gt = collect_gt(samples, 'cpu', 3)
    assert gt.batch.tolist() == [0, 2] and gt.labels.tolist() == [0, 1]
    assert torch.equal(gt.boxes, GT.boxes)
    samples[0].gt_instances_3d.labels_3d = torch.tensor([5])
    with pytest.raises(ValueError, match=r'labels_3d must lie in \[0, 3\)'):
        collect_gt(samples, 'cpu', 3)
    samples[0].gt_instances_3d = InstanceData(bboxes_3d=torch.zeros(1, 7), labels_3d=torch.tensor([0]))
    with pytest.raises(ValueError, match='dimensions'):
        collect_gt(samples, 'cpu', 3)
