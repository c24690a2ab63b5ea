"""KITTI's own scoring (DetMetric kitti_scoring=True): hand-made cases, exactness on small sets, and a brute-force
re-implementation of the devkit's per-threshold matching on random frames."""
import math

import numpy as np
import pytest
import torch

from fsdlite.evaluation.functional.kitti_eval import (clean_frame, dontcare_cover, frame_curve, interpolated_ap,
                                                      pooled_curve)
from fsdlite.registry import METRICS
from fsdlite.structures.camera import KITTI_NOMINAL_CALIB, image_boxes, lidar2img_from_calib

LIDAR2IMG = lidar2img_from_calib(KITTI_NOMINAL_CALIB)
CAR = [3.9, 1.6, 1.5]


def _box(x, y, size=CAR, yaw=0.0):
    return [x, y, -1.73, *size, yaw]


def _annos(objects):
    """kitti_annos of (name, lidar box, occluded, truncated) tuples; 2D boxes projected like real labels."""
    boxes = np.array([o[1] for o in objects], dtype=np.float64).reshape(-1, 7)
    bbox, _ = image_boxes(boxes, LIDAR2IMG)
    return dict(name=np.array([o[0] for o in objects], dtype=object), box_lidar=boxes, bbox=bbox,
                occluded=np.array([o[2] if len(o) > 2 else 0 for o in objects]),
                truncated=np.array([o[3] if len(o) > 3 else 0.0 for o in objects]))


def _sample(objects, detections, classes=('Car', 'Pedestrian', 'Cyclist'), dontcare=()):
    annos = _annos(objects)
    if dontcare:
        annos['name'] = np.concatenate([annos['name'], np.array(['DontCare'] * len(dontcare), dtype=object)])
        annos['box_lidar'] = np.concatenate([annos['box_lidar'], np.full((len(dontcare), 7), -1000.0)])
        annos['bbox'] = np.concatenate([annos['bbox'], np.array(dontcare, dtype=np.float64)])
        annos['occluded'] = np.concatenate([annos['occluded'], np.zeros(len(dontcare), int)])
        annos['truncated'] = np.concatenate([annos['truncated'], np.zeros(len(dontcare))])
    boxes = torch.tensor([d[1] for d in detections], dtype=torch.float32).reshape(-1, 7)
    return dict(gt_instances_3d=dict(bboxes_3d=torch.zeros(0, 7), labels_3d=torch.zeros(0, dtype=torch.long)),
                pred_instances_3d=dict(bboxes_3d=boxes, scores_3d=torch.tensor([d[2] for d in detections]),
                                       labels_3d=torch.tensor([classes.index(d[0]) for d in detections])),
                kitti_annos=annos, lidar2img=LIDAR2IMG)


def _score(samples, **kwargs):
    metric = METRICS.build(dict(type='DetMetric', kitti_scoring=True, classes=('Car', 'Pedestrian', 'Cyclist'),
                                **kwargs))
    metric.process(None, samples)
    return metric.compute_metrics(metric.results)


def test_ground_truth_as_detections_scores_100_on_few_cars():
    """Four cars (the devkit's own recall sampling gives 7.5 here): interpolated R40 is exact."""
    cars = [('Car', _box(10 + 8 * i, 3 * (-1) ** i)) for i in range(4)]
    r = _score([_sample(cars, [('Car', b, 0.9 - 0.1 * i) for i, (_, b) in enumerate(cars)])])
    assert r['Car_BEV_AP@0.7'] == pytest.approx(1.0) and r['Car_3D_AP@0.7'] == pytest.approx(1.0)
    assert r['Car_false_boxes_per_frame'] == 0 and r['Car_num_gt'] == 4
    assert math.isnan(r['Pedestrian_BEV_AP@0.5'])  # no ground truth: undefined, not 0


def test_false_positive_above_the_true_one():
    cars = [('Car', _box(15, 2)), ('Car', _box(25, -3))]
    dets = [('Car', _box(20, 8), 0.95), ('Car', _box(15, 2), 0.9), ('Car', _box(25, -3), 0.8)]
    r = _score([_sample(cars, dets)])
    assert r['Car_BEV_AP@0.7'] == pytest.approx(2 / 3)  # precision 1/2 at recall 1/2, 2/3 at recall 1
    assert r['Car_false_boxes_per_frame'] == 1


def test_dontcare_region_makes_a_detection_neither_true_nor_false():
    cars = [('Car', _box(15, 2))]
    ghost = _box(30, 6)
    bbox, _ = image_boxes(np.array([ghost]), LIDAR2IMG)
    dets = [('Car', ghost, 0.95), ('Car', _box(15, 2), 0.9)]
    without = _score([_sample(cars, dets)])
    with_dc = _score([_sample(cars, dets, dontcare=[bbox[0] + [-5, -5, 5, 5]])])
    assert without['Car_BEV_AP@0.7'] == pytest.approx(0.5) and without['Car_false_boxes_per_frame'] == 1
    assert with_dc['Car_BEV_AP@0.7'] == pytest.approx(1.0) and with_dc['Car_false_boxes_per_frame'] == 0


def test_van_predicted_as_car_is_neither_true_nor_false():
    objects = [('Car', _box(15, 2)), ('Van', _box(22, -4, [5.0, 1.9, 2.1]))]
    dets = [('Car', _box(22, -4, [5.0, 1.9, 2.1]), 0.95), ('Car', _box(15, 2), 0.9)]
    r = _score([_sample(objects, dets)])
    assert r['Car_BEV_AP@0.7'] == pytest.approx(1.0) and r['Car_false_boxes_per_frame'] == 0
    assert r['Car_num_gt'] == 1
    # the same box labelled Truck is another class: the detection is a false positive
    r = _score([_sample([objects[0], ('Truck', objects[1][1])], dets)])
    assert r['Car_BEV_AP@0.7'] == pytest.approx(0.5)


def test_box_too_small_for_moderate_is_ignored_there_only():
    far = _box(68, 1)  # ~20 px high: below moderate's 25 px, counted nowhere
    assert image_boxes(np.array([far]), LIDAR2IMG)[0][0, 3] - image_boxes(np.array([far]), LIDAR2IMG)[0][0, 1] < 25
    objects = [('Car', _box(15, 2)), ('Car', far)]
    missed = _score([_sample(objects, [('Car', _box(15, 2), 0.9)])])
    found = _score([_sample(objects, [('Car', _box(15, 2), 0.9), ('Car', far, 0.95)])])
    for r in (missed, found):
        assert r['Car_num_gt'] == 1 and r['Car_BEV_AP@0.7'] == pytest.approx(1.0)
        assert r['Car_false_boxes_per_frame'] == 0
    occluded = _score([_sample([('Car', _box(15, 2), 2)], [('Car', _box(15, 2), 0.9)])])
    assert math.isnan(occluded['Car_BEV_AP@0.7']) and occluded['Car_BEV_AP@0.7_hard'] == pytest.approx(1.0)


def test_a_detection_matches_one_ground_truth_only():
    cars = [('Car', _box(15, 2))]
    dets = [('Car', _box(15, 2), 0.9), ('Car', _box(15.1, 2), 0.8)]
    r = _score([_sample(cars, dets)])
    assert r['Car_BEV_AP@0.7'] == pytest.approx(1.0) and r['Car_false_boxes_per_frame'] == 1


def _brute_force_ap(frames, thr):
    """The devkit's procedure spelled out: at every distinct score, rematch every frame from scratch."""
    scores = sorted({s for f in frames for s in f['scores']}, reverse=True)
    tps, fps, fns = [], [], []
    for t in scores:
        tp = fp = fn = 0
        for f in frames:
            ious, ig_gt, ig_det, dc = f['ious'], f['ignored_gt'], f['ignored_det'], f['dontcare']
            assigned = [False] * len(f['scores'])
            for i in range(ious.shape[1]):
                best, best_overlap, took_ignored = -1, 0.0, False
                for j in range(len(f['scores'])):
                    if assigned[j] or f['scores'][j] < t or not ious[j, i] > thr:
                        continue
                    if not ig_det[j] and (ious[j, i] > best_overlap or took_ignored):
                        best, best_overlap, took_ignored = j, ious[j, i], False
                    elif ig_det[j] and best < 0:
                        best, took_ignored = j, True
                if best < 0:
                    fn += int(not ig_gt[i])
                elif ig_gt[i] or ig_det[best]:
                    assigned[best] = True
                else:
                    tp += 1
                    assigned[best] = True
            for j in range(len(f['scores'])):
                if f['scores'][j] >= t and not assigned[j] and not ig_det[j] and not dc[j] > thr:
                    fp += 1
        tps.append(tp), fps.append(fp), fns.append(fn)
    return interpolated_ap(tps, fps, fns) if scores else 0.0


def test_matches_a_brute_force_devkit_procedure_on_random_frames():
    rng = np.random.default_rng(0)
    for trial in range(20):
        frames = []
        for _ in range(int(rng.integers(1, 6))):
            g, d = int(rng.integers(0, 6)), int(rng.integers(0, 8))
            ious = np.where(rng.random((d, g)) < 0.4, rng.uniform(0, 1, (d, g)), 0.0).round(2)
            frames.append(dict(ious=ious, scores=rng.choice([0.2, 0.4, 0.5, 0.7, 0.9], d) + rng.normal(0, 0.01, d)
                               * (trial % 2), ignored_gt=rng.random(g) < 0.25, ignored_det=rng.random(d) < 0.2,
                               dontcare=np.where(rng.random(d) < 0.2, 0.9, 0.0)))
        thr = 0.5
        _, tp, fp, fn, num_gt = pooled_curve([frame_curve(f['ious'], f['scores'], thr, f['ignored_gt'],
                                                          f['ignored_det'], f['dontcare']) for f in frames])
        fast = interpolated_ap(tp, fp, fn) if len(tp) else 0.0
        assert fast == pytest.approx(_brute_force_ap(frames, thr)), trial


def test_cleaning_by_difficulty_and_dontcare_cover():
    names = np.array(['Car', 'Van', 'Pedestrian', 'DontCare', 'Car'], dtype=object)
    bbox = np.array([[0, 0, 50, 50], [0, 0, 50, 50], [0, 0, 10, 50], [100, 100, 200, 200], [0, 0, 50, 30]], float)
    dets = np.array([[0, 0, 10, 20], [0, 0, 10, 40], [0, 0, 10, 24.9], [0, 0, 10, 30], [0, 0, 10, 25]])
    cleaned = clean_frame(names, bbox, np.array([0, 0, 0, 0, 0]), np.array([0, 0, 0, 0, 0.4]),
                          dets, np.array([True, True, False, False, True]), 'Car', 'moderate')
    assert cleaned['gt_rows'].tolist() == [0, 1, 4]
    assert cleaned['ignored_gt'].tolist() == [False, True, True]  # Van neighbour; truncation 0.4 > 0.3
    # 20 px < 25 px: ignored; a low (24.9 -> 24 px) detection of another class takes part, ignored; 25 px counts
    assert cleaned['det_rows'].tolist() == [0, 1, 2, 4] and cleaned['ignored_det'].tolist() == [True, False, True,
                                                                                                False]
    at_limit = clean_frame(['Car'], [[0, 0, 10, 25]], [0], [0.0], np.zeros((0, 4)), np.zeros(0, bool), 'Car',
                           'moderate')
    assert at_limit['ignored_gt'].tolist() == [True]  # ground truth exactly 25 px high is ignored (<=)
    assert dontcare_cover(np.array([[120, 120, 140, 140], [0, 0, 10, 10]]), cleaned['dontcare']).tolist() == [1, 0]
    with pytest.raises(ValueError, match='difficulty'):
        clean_frame(names, bbox, np.zeros(5), np.zeros(5), np.zeros((0, 4)), np.zeros(0, bool), 'Car', 'expert')


def test_metric_needs_kitti_metainfo_and_consistent_options():
    sample = _sample([('Car', _box(15, 2))], [])
    del sample['kitti_annos']
    with pytest.raises(KeyError, match='kitti_annos'):
        _score([sample])
    with pytest.raises(ValueError, match='min_gt_points'):
        METRICS.build(dict(type='DetMetric', kitti_scoring=True, min_gt_points=5))
    with pytest.raises(ValueError, match='difficulties'):
        METRICS.build(dict(type='DetMetric', kitti_scoring=True, difficulties=('expert',)))
