"""ClsMetric: accuracy, per-class and mean class accuracy; bad samples."""
import math

import pytest
import torch

from fsdlite.evaluation.metrics.cls_metric import ClsMetric


def samples(pairs):
    return [dict(gt_label=torch.tensor(g), pred_label=torch.tensor(p)) for g, p in pairs]


def test_accuracies():
    metric = ClsMetric(classes=('a', 'b', 'c'))
    metric.process(None, samples([(0, 0), (0, 1), (1, 1), (1, 1), (1, 0)]))
    out = metric.compute_metrics(metric.results)
    assert out['acc'] == pytest.approx(3 / 5)
    assert out['acc_a'] == pytest.approx(0.5) and out['acc_b'] == pytest.approx(2 / 3)
    assert math.isnan(out['acc_c'])  # no ground truth of class c
    assert out['mAcc'] == pytest.approx((0.5 + 2 / 3) / 2)


def test_dataset_meta_and_errors():
    metric = ClsMetric()
    metric.dataset_meta = dict(classes=('x', 'y'))
    metric.process(None, samples([(1, 1)]))
    assert metric.compute_metrics(metric.results)['acc'] == 1.0
    with pytest.raises(KeyError, match='pred_label'):
        metric.process(None, [dict(gt_label=torch.tensor(0))])
    with pytest.raises(ValueError, match='one integer label'):
        metric.process(None, [dict(gt_label=torch.tensor([0, 1]), pred_label=torch.tensor(0))])
    metric.results = [(0, 2)]
    with pytest.raises(ValueError, match='labels must lie'):
        metric.compute_metrics(metric.results)
    with pytest.raises(ValueError, match='class names'):
        ClsMetric().classes
