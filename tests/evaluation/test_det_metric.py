"""KITTI-style AP (R40): hand cases for matching and AP math, 3D IoU from BEV IoU, the registered metric."""
import math

import numpy as np
import pytest
import torch

from fsdlite.evaluation.functional import (average_precision_r40, boxes_iou_3d_from_bev, match_detections,
                                           precision_recall)


def test_perfect_detections_give_one():
    assert average_precision_r40([0.9, 0.8, 0.7], [True, True, True], 3) == 1.0


def test_false_positive_ranked_first():
    # FP at the top: precision 0, 1/2, 2/3 at recall 0, 1/2, 1 -> interpolated 2/3 everywhere
    ap = average_precision_r40([0.95, 0.9, 0.8], [False, True, True], 2)
    assert ap == pytest.approx(2 / 3)


def test_false_positive_ranked_last_costs_nothing():
    assert average_precision_r40([0.9, 0.8, 0.1], [True, True, False], 2) == 1.0


def test_missing_ground_truth_caps_recall():
    # 1 of 2 GT found: recall 0.5 reached at positions 1..20 of 40 -> AP 0.5
    assert average_precision_r40([0.9], [True], 2) == pytest.approx(0.5)
    # recall 1/3: positions k/40 <= 1/3 are k = 1..13 -> 13/40
    assert average_precision_r40([0.9], [True], 3) == pytest.approx(13 / 40)


def test_no_detections_and_no_gt():
    assert average_precision_r40([], [], 4) == 0.0
    assert math.isnan(average_precision_r40([0.5], [False], 0))
    with pytest.raises(ValueError, match='num_gt'):
        average_precision_r40([], [], -1)


def test_precision_recall_sorting():
    precision, recall = precision_recall([0.1, 0.9, 0.5], [True, False, True], 2)
    assert np.allclose(precision, [0.0, 0.5, 2 / 3])
    assert np.allclose(recall, [0.0, 0.5, 1.0])


def test_match_greedy_by_score_and_duplicates():
    ious = np.array([[0.6, 0.0],   # det 0 (score 0.5)
                     [0.8, 0.3],   # det 1 (score 0.9) takes GT 0 first
                     [0.7, 0.0]])  # det 2 duplicate of GT 0 -> FP
    is_tp, ignored = match_detections(ious, [0.5, 0.9, 0.7], 0.5)
    assert is_tp.tolist() == [False, True, False]
    assert not ignored.any()


def test_match_threshold_inclusive_and_best_iou():
    ious = np.array([[0.5, 0.7]])
    is_tp, _ = match_detections(ious, [1.0], 0.5)
    assert is_tp.tolist() == [True]
    is_tp, _ = match_detections(np.array([[0.49]]), [1.0], 0.5)
    assert is_tp.tolist() == [False]


def test_ignored_ground_truth():
    ious = np.array([[0.9, 0.0], [0.0, 0.8], [0.0, 0.0]])
    is_tp, ignored = match_detections(ious, [0.9, 0.8, 0.7], 0.5, gt_ignored=[False, True])
    assert is_tp.tolist() == [True, False, False]
    assert ignored.tolist() == [False, True, False]


def test_match_empty_shapes_and_invalid():
    is_tp, ignored = match_detections(np.zeros((2, 0)), [0.3, 0.2], 0.5)
    assert not is_tp.any() and not ignored.any()
    with pytest.raises(ValueError, match='ious'):
        match_detections(np.zeros((3, 1)), [0.1], 0.5)


def test_iou_3d_from_bev_hand_case():
    a = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]])
    b = torch.tensor([[1.0, 0.0, 1.0, 2.0, 2.0, 2.0, 0.0],   # half overlap in x, half in z
                      [0.0, 0.0, 5.0, 2.0, 2.0, 1.0, 0.0],   # no z overlap
                      [0.0, 0.0, 0.0, 0.0, 2.0, 2.0, 0.0]])  # degenerate
    bev = torch.tensor([[1 / 3, 1.0, 0.0]])  # BEV IoU of [0,0,2,2] vs [1,0,2,2] is 2 / 6
    iou = boxes_iou_3d_from_bev(a, b, bev)
    # intersection 1 x 2 x 1 = 2, union 8 + 8 - 2 = 14
    assert torch.allclose(iou, torch.tensor([[2 / 14, 0.0, 0.0]]))
    with pytest.raises(ValueError, match='iou_bev'):
        boxes_iou_3d_from_bev(a, b, bev.T)


# ----------------------------------------------------------------------------- the registered metric
def _frame(gt_boxes, gt_labels, boxes, scores, labels, num_points=None):
    from fsdlite.structures import Det3DDataSample, InstanceData

    s = Det3DDataSample(metainfo={} if num_points is None else dict(num_points_in_gt=num_points))
    s.gt_instances_3d = InstanceData(bboxes_3d=torch.tensor(gt_boxes, dtype=torch.float32).view(-1, 7),
                                     labels_3d=torch.tensor(gt_labels, dtype=torch.int64))
    s.pred_instances_3d = InstanceData(bboxes_3d=torch.tensor(boxes, dtype=torch.float32).view(-1, 7),
                                       scores_3d=torch.tensor(scores, dtype=torch.float32),
                                       labels_3d=torch.tensor(labels, dtype=torch.int64))
    return s.to_dict()  # what mmengine's Evaluator hands to metrics


CAR = [10.0, 0.0, -1.7, 4.0, 2.0, 1.5, 0.3]
PED = [5.0, 5.0, -1.7, 0.8, 0.6, 1.7, 0.0]


def _metric(**kw):
    from fsdlite.registry import METRICS

    return METRICS.build(dict(type='DetMetric', classes=('Car', 'Pedestrian', 'Cyclist'), **kw))


def test_metric_perfect_and_shifted():
    def along_heading(box, d):
        out = list(box)
        out[0] += d * math.cos(box[6])
        out[1] += d * math.sin(box[6])
        return out

    shifted = along_heading(CAR, 0.6)  # BEV IoU (4 - 0.6) / (4 + 0.6) = 0.739 -> TP at 0.7 and 0.5
    far = along_heading(CAR, 1.5)      # IoU 2.5 / 5.5 = 0.4545 -> FP at 0.5
    metric = _metric()
    metric.process({}, [_frame([CAR, PED], [0, 1], [CAR, PED], [0.9, 0.8], [0, 1]),
                        _frame([CAR], [0], [shifted], [0.7], [0]),
                        _frame([CAR], [0], [far], [0.95], [0])])
    res = metric.compute_metrics(metric.results)
    # cars: scores 0.95 FP, 0.9 TP, 0.7 TP over 3 GT -> precision 1/2 at recall 1/3, 2/3 at 2/3, recall capped
    expected = (26 * (2 / 3) + 0) / 40  # positions k/40 <= 2/3 -> k = 1..26, best precision there is 2/3
    assert res['Car_BEV_AP@0.7'] == pytest.approx(expected)
    assert res['Car_BEV_AP@0.5'] == pytest.approx(expected)
    assert res['Pedestrian_BEV_AP@0.5'] == pytest.approx(1.0)
    assert res['Pedestrian_3D_AP@0.25'] == pytest.approx(1.0)
    assert math.isnan(res['Cyclist_BEV_AP@0.5'])
    assert res['BEV_mAP'] == pytest.approx((expected + 1.0) / 2)  # cyclist (no GT) is left out
    assert set(res) >= {'Car_3D_AP@0.7', 'BEV_mAP_loose', '3D_mAP'}


def test_metric_3d_needs_z_overlap():
    lifted = list(CAR)
    lifted[2] += 1.0  # same footprint, z overlap 0.5 of 1.5 -> 3D IoU 1/5
    metric = _metric(iou_thresholds=dict(Car=(0.7, 0.15)))
    metric.process({}, [_frame([CAR], [0], [lifted], [0.9], [0])])
    res = metric.compute_metrics(metric.results)
    assert res['Car_BEV_AP@0.7'] == pytest.approx(1.0)
    assert res['Car_3D_AP@0.7'] == 0.0
    assert res['Car_3D_AP@0.15'] == pytest.approx(1.0)


def test_metric_ignores_sparse_gt():
    metric = _metric(min_gt_points=5)
    cyclist = [20.0, -5.0, -1.7, 1.8, 0.6, 1.7, 0.0]
    metric.process({}, [_frame([CAR, PED, cyclist], [0, 1, 2], [CAR], [0.9], [0], num_points=[100, 2, 5])])
    res = metric.compute_metrics(metric.results)
    assert res['Car_BEV_AP@0.7'] == pytest.approx(1.0)
    assert math.isnan(res['Pedestrian_BEV_AP@0.5'])  # its only GT is ignored: no requirement
    assert res['Cyclist_BEV_AP@0.5'] == 0.0  # exactly min_gt_points points: not fewer, so required (and missed)
    with pytest.raises(KeyError, match='num_points_in_gt'):
        _metric(min_gt_points=5).process({}, [_frame([CAR], [0], [], [], [])])


def test_metric_invalid():
    with pytest.raises(ValueError, match='iou_thresholds'):
        _metric(iou_thresholds=dict(Car=(0.7, 0.5, 0.3)))
    with pytest.raises(ValueError, match='kinds'):
        _metric(kinds=('bev', 'aos'))
    with pytest.raises(ValueError, match='labels_3d'):
        _metric().process({}, [_frame([CAR], [0], [CAR], [0.9], [7])])
    with pytest.raises(KeyError, match='pred_instances_3d'):
        _metric().process({}, [{'gt_instances_3d': {}}])


# ----------------------------------------------------------------------------- iou_thresholds boundaries
def test_metric_iou_threshold_range_is_half_open():
    # documented range (0, 1]: 1.0 is accepted, 0 and anything above 1 are rejected (naming the argument)
    assert _metric(iou_thresholds=dict(Car=(1.0, 0.5))).thresholds('Car') == (1.0, 0.5)
    assert _metric(iou_thresholds=dict(Car=1.0)).thresholds('Car') == (1.0,)
    for bad in ((0.0, 0.5), (0.7, 0.0), 0.0, (1.0 + 1e-9,), (0.7, 1.5)):
        with pytest.raises(ValueError, match=r"iou_thresholds\['Car'\]"):
            _metric(iou_thresholds=dict(Car=bad))


def test_metric_iou_threshold_count_is_one_or_two():
    assert _metric(iou_thresholds=dict(Car=[0.6])).thresholds('Car') == (0.6,)
    assert _metric(iou_thresholds=dict(Car=[0.6, 0.4])).thresholds('Car') == (0.6, 0.4)
    for bad in ((), [], (0.7, 0.5, 0.3)):
        with pytest.raises(ValueError, match=r"iou_thresholds\['Car'\]"):
            _metric(iou_thresholds=dict(Car=bad))


def test_metric_single_threshold_class_is_left_out_of_loose_map():
    # Car has only a strict threshold: it enters the strict mAP but not the loose one (no IndexError)
    metric = _metric(iou_thresholds=dict(Car=(0.7,)), kinds=('bev',))
    metric.process({}, [_frame([CAR, PED], [0, 1], [CAR], [0.9], [0])])  # car found, pedestrian missed
    res = metric.compute_metrics(metric.results)
    assert res['Car_BEV_AP@0.7'] == pytest.approx(1.0)
    assert 'Car_BEV_AP@0.5' not in res
    assert res['Pedestrian_BEV_AP@0.5'] == 0.0 and res['Pedestrian_BEV_AP@0.25'] == 0.0
    assert res['BEV_mAP'] == pytest.approx(0.5)  # mean of Car 1.0 and Pedestrian 0.0
    assert res['BEV_mAP_loose'] == 0.0  # Pedestrian only
    # every class with one threshold: no loose mAP at all
    metric = _metric(iou_thresholds=dict(Car=0.7, Pedestrian=0.5, Cyclist=0.5), kinds=('bev',))
    metric.process({}, [_frame([CAR], [0], [CAR], [0.9], [0])])
    res = metric.compute_metrics(metric.results)
    assert res['BEV_mAP'] == pytest.approx(1.0) and 'BEV_mAP_loose' not in res
