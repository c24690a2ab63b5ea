"""SegMetric: confusion matrix, IoU values on a hand example, background / ignore handling."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.evaluation.metrics.seg_metric import SegMetric, confusion_matrix, iou_from_confusion
from fsdlite.registry import METRICS
from fsdlite.structures import Det3DDataSample, PointData


def _sample(gt, pred):
    s = Det3DDataSample()
    s.gt_pts_seg = PointData(pts_semantic_mask=torch.tensor(gt))
    s.pred_pts_seg = PointData(pts_semantic_mask=torch.tensor(pred))
    return s.to_dict()


def test_confusion_matrix_by_hand():
    cm = confusion_matrix([0, 0, 1, 2, 2, 2, -1], [0, 1, 1, 2, 0, 2, 2], 3, ignore_index=-1)
    assert cm.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    iou = iou_from_confusion(cm)
    assert np.allclose(iou, [1 / 3, 1 / 2, 2 / 3])
    assert math.isnan(iou_from_confusion(np.zeros((2, 2)))[0])


def test_metric_on_hand_example():
    # classes: Car=0, Ped=1, background=2.
    metric = SegMetric(classes=('Car', 'Ped'))
    metric.process(None, [_sample([0, 0, 0, 1, 2, 2], [0, 0, 2, 0, 2, 0]), _sample([1, -1], [1, 0])])
    res = metric.compute_metrics(metric.results)
    # Car: TP 2, FN 1 (->bg), FP 2 (ped->car, bg->car) -> 2/5.  Ped: TP 1, FN 1, FP 0 -> 1/2.
    # background: TP 1, FN 1, FP 1 -> 1/3.  fg merged: TP 4 (car/ped in any fg class), FN 1, FP 1 -> 4/6.
    assert res['IoU_Car'] == pytest.approx(0.4)
    assert res['IoU_Ped'] == pytest.approx(0.5)
    assert res['IoU_background'] == pytest.approx(1 / 3)
    assert res['mIoU'] == pytest.approx(0.45)
    assert res['fg_IoU'] == pytest.approx(4 / 6)
    assert res['acc'] == pytest.approx(4 / 7)


def test_without_background_and_absent_classes():
    metric = METRICS.build(dict(type='SegMetric', classes=('a', 'b', 'c'), with_background=False, ignore_index=255))
    metric.process(None, [_sample([0, 0, 1, 255], [0, 0, 1, 2])])
    res = metric.compute_metrics(metric.results)
    assert res['IoU_a'] == 1.0 and res['IoU_b'] == 1.0 and math.isnan(res['IoU_c'])
    assert res['mIoU'] == 1.0 and 'fg_IoU' not in res and 'IoU_background' not in res


def test_classes_from_dataset_meta_and_errors():
    metric = SegMetric()
    with pytest.raises(ValueError, match='class names'):
        metric.process(None, [_sample([0], [0])])
    metric.dataset_meta = dict(classes=('Car', 'Pedestrian', 'Cyclist'))
    assert metric.label_names == ('Car', 'Pedestrian', 'Cyclist', 'background')
    with pytest.raises(ValueError, match=r'gt labels must lie in \[0, 4\)'):
        metric.process(None, [_sample([7], [0])])
    with pytest.raises(KeyError, match='pred_pts_seg'):
        metric.process(None, [{'gt_pts_seg': {'pts_semantic_mask': torch.tensor([0])}}])
    with pytest.raises(ValueError, match='same shape'):
        confusion_matrix([0, 1], [0], 2)
    with pytest.raises(TypeError, match='integer'):
        confusion_matrix(np.array([0.5]), np.array([0]), 2)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=40))
def test_properties(pairs):
    gt = np.array([p[0] for p in pairs], dtype=np.int64)
    pred = np.array([p[1] for p in pairs], dtype=np.int64)
    cm = confusion_matrix(gt, pred, 4)
    assert cm.sum() == len(pairs) and (cm.sum(1) == np.bincount(gt, minlength=4)).all()
    iou = iou_from_confusion(cm)
    assert np.all((iou[np.isfinite(iou)] >= 0) & (iou[np.isfinite(iou)] <= 1))
    perfect = iou_from_confusion(confusion_matrix(gt, gt, 4))
    assert np.all(perfect[np.isfinite(perfect)] == 1)


def test_label_equal_to_num_labels_is_rejected():
    # valid labels are [0, K): K - 1 is fine, K itself is rejected for both gt and pred
    assert confusion_matrix([2], [2], 3).tolist() == [[0, 0, 0], [0, 0, 0], [0, 0, 1]]
    with pytest.raises(ValueError, match=r'gt labels must lie in \[0, 3\)'):
        confusion_matrix([3], [0], 3)
    with pytest.raises(ValueError, match=r'pred labels must lie in \[0, 3\)'):
        confusion_matrix([0], [3], 3)
    metric = SegMetric(classes=('Car', 'Ped'))  # K = 3 with background
    metric.process(None, [_sample([2], [2])])
    with pytest.raises(ValueError, match=r'pred labels must lie in \[0, 3\)'):
        metric.process(None, [_sample([0], [3])])
