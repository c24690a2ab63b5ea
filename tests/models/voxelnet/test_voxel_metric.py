"""VoxelMaterialMetric: ROC AUC, baseline handling, perfect and useless predictions."""
import itertools

import numpy as np
import pytest
import torch

from fsdlite.evaluation.metrics.voxel_metrics import (VoxelMaterialMetric, cross_fitted_baseline_classes,
                                                      deviation_from_median, roc_auc)
from fsdlite.structures import Det3DDataSample, PointData

CLASSES = ('beryllium', 'carbon', 'silicon', 'iron', 'lead')


def test_roc_auc_hand_values_and_ties():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == pytest.approx(0.75)
    assert roc_auc([1, 1, 1, 1], [True, False, True, False]) == pytest.approx(0.5)
    assert np.isnan(roc_auc([1, 2], [True, True]))


def test_roc_auc_equals_pair_counting():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 40).astype(float)             # many ties
    labels = rng.random(40) < 0.3
    pos, neg = scores[labels], scores[~labels]
    pairs = [(p > n) + 0.5 * (p == n) for p, n in itertools.product(pos, neg)]
    assert roc_auc(scores, labels) == pytest.approx(np.mean(pairs))


def test_deviation_fills_missing_voxels_with_the_median():
    dev = deviation_from_median(np.array([1.0, np.nan, 3.0, 2.0]))
    np.testing.assert_allclose(dev, [1.0, 0.0, 1.0, 0.0])


def _sample(labels, block, baseline, scores=None, log_x0=None):
    s = Det3DDataSample()
    s.gt_pts_seg = PointData(pts_semantic_mask=torch.tensor(labels), block_mask=torch.tensor(block),
                             baseline_score=torch.tensor(baseline, dtype=torch.float32))
    pred = dict(pts_scores=torch.tensor(scores)) if scores is not None else dict(log_x0=torch.tensor(log_x0))
    s.pred_pts_seg = PointData(**pred)
    return s


def _volumes():
    # 4 volumes: background class 0 with a lead (4) block of 2 voxels; the baseline separates them too
    out = []
    for v in range(4):
        labels = [0, 0, 0, 4, 4, 0]
        block = [c == 4 for c in labels]
        baseline = [-5.0, -5.1, np.nan, -2.0, -2.1, -4.9 + 0.01 * v]
        out.append((labels, block, baseline))
    return out


def test_perfect_model_and_baseline():
    metric = VoxelMaterialMetric(classes=CLASSES)
    for labels, block, baseline in _volumes():
        scores = np.eye(5)[labels]
        metric.process({}, [_sample(labels, block, baseline, scores=scores.tolist())])
    res = metric.evaluate(4)
    assert res['voxel/accuracy'] == 1.0 and res['voxel/block_auc'] == 1.0
    assert res['voxel/baseline_block_auc'] == pytest.approx(1.0)
    assert res['voxel/baseline_accuracy'] == 1.0          # NaN voxel -> volume median -> background
    assert res['voxel/baseline_empty_voxels'] == pytest.approx(1 / 6)
    assert res['voxel/num_voxels'] == 24


def test_uninformative_model_scores_half_auc():
    metric = VoxelMaterialMetric(classes=CLASSES)
    for labels, block, baseline in _volumes():
        metric.process({}, [_sample(labels, block, baseline, log_x0=[-3.0] * 6)])
    res = metric.evaluate(4)
    assert res['voxel/block_auc'] == pytest.approx(0.5)
    assert res['voxel/auc_gain'] == pytest.approx(0.5 - res['voxel/baseline_block_auc'])
    # log X0 = -3 is nearest to silicon (ln 0.0937 = -2.37): every voxel predicted silicon, none correct
    assert res['voxel/accuracy'] == 0.0


def test_baseline_classes_are_fitted_on_the_other_fold():
    vols = [dict(labels=np.array([0, 1]), baseline=np.array([0.0, 1.0])),
            dict(labels=np.array([0, 1]), baseline=np.array([0.9, 0.1]))]
    preds = cross_fitted_baseline_classes(vols, 2)
    # volume 0 uses volume 1's medians (class 0 at 0.9, class 1 at 0.1) and vice versa
    assert preds[0].tolist() == [1, 0] and preds[1].tolist() == [1, 0]


def test_metric_needs_classes_and_consistent_shapes():
    metric = VoxelMaterialMetric()
    labels, block, baseline = _volumes()[0]
    metric.process({}, [_sample(labels, block, baseline, log_x0=[0.0] * 6)])
    with pytest.raises(ValueError, match='no material classes'):
        metric.compute_metrics(metric.results)
    with pytest.raises(ValueError, match='log_x0 has 5 voxels but the labels have 6'):
        metric.process({}, [_sample(labels, block, baseline, log_x0=[0.0] * 5)])
