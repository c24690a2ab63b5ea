"""3D detection metric: BEV and 3D average precision with 40 recall positions (R40).

Two protocols:

* ``kitti_scoring=True`` (KITTI configs, real or simulated KITTI frames): KITTI's own rules -- easy / moderate /
  hard from 2D box height, occlusion and truncation, DontCare regions and neighbouring classes neither true nor
  false, devkit matching, interpolated R40 (:mod:`.kitti_scoring`, :mod:`fsdlite.evaluation.functional.kitti_eval`);
* otherwise a plain protocol for data without KITTI labels: per class, ground truth and predictions of every frame
  are matched greedily by score at each IoU threshold of the class (:mod:`fsdlite.evaluation.functional.ap`);
  ground-truth boxes with fewer than ``min_gt_points`` lidar points are *ignored* (neither required nor
  penalised; the count is reported).

Rotated BEV IoU comes from ``fsdlite.ops.boxes_iou_bev`` and 3D IoU from it times the vertical overlap.
"""
import math

import numpy as np
import torch
from mmengine.evaluator import BaseMetric
from mmengine.logging import print_log

from fsdlite.ops import boxes_iou_bev

from ...registry import METRICS
from ._class_names import ClassNamesMixin
from .kitti_scoring import frame_record, kitti_metrics, kitti_table
from ..functional import average_precision_r40, boxes_iou_3d_from_bev, match_detections
from ..functional.kitti_eval import DIFFICULTIES

DEFAULT_IOU_THRESHOLDS = {'Car': (0.7, 0.5), 'Pedestrian': (0.5, 0.25), 'Cyclist': (0.5, 0.25)}
KINDS = ('bev', '3d')


def _field(sample, name):
    """``sample[name]`` for dict samples (as the Evaluator passes them) or data elements."""
    value = sample.get(name) if isinstance(sample, dict) else getattr(sample, name, None)
    if value is None:
        raise KeyError(f'DetMetric: every data sample needs {name!r}, got keys '
                       f'{sorted(sample.keys()) if isinstance(sample, dict) else sample.keys()}')
    return value


def _tensor(instances, key, shape_tail, dtype):
    value = instances[key] if isinstance(instances, dict) else getattr(instances, key)
    value = torch.as_tensor(value).detach().to('cpu', dtype)
    if tuple(value.shape[1:]) != shape_tail:
        raise ValueError(f'DetMetric: {key} must have shape (M, {", ".join(map(str, shape_tail))}) '
                         f'(or (M,)), got {tuple(value.shape)}')
    return value


@METRICS.register_module()
class DetMetric(ClassNamesMixin, BaseMetric):
    """BEV / 3D AP (R40) per class at configurable IoU thresholds.

    Args:
        classes (sequence[str], optional): class names in label order; default ``dataset_meta['classes']``.
        iou_thresholds (dict): class name -> (strict, loose) IoU thresholds (one or two values);
            classes not listed use (0.5, 0.25); defaults: Car (0.7, 0.5), Pedestrian/Cyclist (0.5, 0.25).
        kinds (sequence[str]): any of 'bev', '3d'.
        min_gt_points (int): ground truth with fewer lidar points (metainfo ``num_points_in_gt``) is ignored
            (plain protocol only).
        kitti_scoring (bool): score with KITTI's own rules (needs ``kitti_annos`` / ``lidar2img`` metainfo).
        difficulties (sequence[str]): with KITTI scoring, which of 'easy', 'moderate', 'hard' to report
            (moderate is always computed: it gives the unsuffixed keys).
        collect_device, prefix: see :class:`mmengine.evaluator.BaseMetric`.

    Result keys: ``{class}_{BEV|3D}_AP@{thr}`` and ``{BEV|3D}_mAP`` (mean over classes with ground
    truth at their strict threshold) and ``{BEV|3D}_mAP_loose`` (at the loose one); with KITTI scoring these are
    the moderate difficulty, ``..._easy`` / ``..._hard`` the others, plus ``{class}_false_boxes_per_frame``
    (predictions scoring >= 0.5 that are false at the loose BEV threshold) and ``{class}_num_gt``.
    """

    default_prefix = 'det'

    def __init__(self, classes=None, iou_thresholds=None, kinds=KINDS, min_gt_points=0, kitti_scoring=False,
                 difficulties=('easy', 'moderate', 'hard'), collect_device='cpu', prefix=None):
        super().__init__(collect_device=collect_device, prefix=prefix)
        self._set_classes(classes)
        self.iou_thresholds = dict(DEFAULT_IOU_THRESHOLDS)
        for name, thresholds in dict(iou_thresholds or {}).items():
            thresholds = tuple(float(t) for t in (thresholds if isinstance(thresholds, (list, tuple))
                                                  else (thresholds,)))
            if not 1 <= len(thresholds) <= 2 or not all(0 < t <= 1 for t in thresholds):
                raise ValueError(f'DetMetric: iou_thresholds[{name!r}] must be one or two values in (0, 1], '
                                 f'got {thresholds}')
            self.iou_thresholds[name] = thresholds
        self.kinds = tuple(kinds)
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ValueError(f'DetMetric: kinds must be a non-empty subset of {KINDS}, got {kinds!r}')
        if int(min_gt_points) < 0:
            raise ValueError(f'DetMetric: min_gt_points must be >= 0, got {min_gt_points}')
        self.min_gt_points = int(min_gt_points)
        if not isinstance(kitti_scoring, bool):
            raise TypeError(f'DetMetric: kitti_scoring must be True or False, got {kitti_scoring!r}')
        if kitti_scoring and self.min_gt_points:
            raise ValueError('DetMetric: min_gt_points applies to the plain protocol; KITTI scoring ignores ground '
                             'truth by difficulty instead (set min_gt_points=0)')
        bad = [d for d in difficulties if d not in DIFFICULTIES]
        if bad:
            raise ValueError(f'DetMetric: difficulties must come from {tuple(DIFFICULTIES)}, got {difficulties!r}')
        self.kitti_scoring = kitti_scoring
        self.difficulties = tuple(dict.fromkeys(['moderate', *difficulties]))

    def thresholds(self, name):
        """(strict[, loose]) IoU thresholds of class ``name``."""
        return self.iou_thresholds.get(name, (0.5, 0.25))

    def _gt_ignored(self, sample, num_gt):
        if self.min_gt_points == 0:
            return torch.zeros(num_gt, dtype=torch.bool)
        counts = sample.get('num_points_in_gt') if isinstance(sample, dict) else sample.metainfo.get(
            'num_points_in_gt')
        if counts is None:
            raise KeyError('DetMetric: min_gt_points > 0 needs metainfo num_points_in_gt (points per GT box)')
        counts = torch.as_tensor(counts).reshape(-1)
        if counts.numel() != num_gt:
            raise ValueError(f'DetMetric: num_points_in_gt has {counts.numel()} entries for {num_gt} GT boxes')
        return counts < self.min_gt_points

    def process(self, data_batch, data_samples):
        """Store, per frame and class, the IoU matrices, scores and ignore flags needed for matching."""

        num_classes = len(self.classes)
        for sample in data_samples:
            gt, pred = _field(sample, 'gt_instances_3d'), _field(sample, 'pred_instances_3d')
            gt_boxes = _tensor(gt, 'bboxes_3d', (7,), torch.float32)
            gt_labels = _tensor(gt, 'labels_3d', (), torch.int64)
            boxes = _tensor(pred, 'bboxes_3d', (7,), torch.float32)
            scores = _tensor(pred, 'scores_3d', (), torch.float32)
            labels = _tensor(pred, 'labels_3d', (), torch.int64)
            for what, lab in (('labels_3d of the predictions', labels), ('labels_3d of the ground truth', gt_labels)):
                if lab.numel() and (int(lab.min()) < 0 or int(lab.max()) >= num_classes):
                    raise ValueError(f'DetMetric: {what} must lie in [0, {num_classes}) for classes '
                                     f'{self.classes}, got values {sorted(set(lab.tolist()))}')
            if self.kitti_scoring:
                self.results.append(frame_record(sample, boxes, scores, labels, self.classes, self.kinds,
                                                 boxes_iou_bev))
                continue
            ignored = self._gt_ignored(sample, gt_boxes.shape[0])
            frame = []
            for c in range(num_classes):
                g, p = gt_labels == c, labels == c
                a, b = boxes[p], gt_boxes[g]
                iou_bev = boxes_iou_bev(a, b) if a.shape[0] and b.shape[0] else a.new_zeros((a.shape[0], b.shape[0]))
                ious = {'bev': iou_bev.numpy()}
                if '3d' in self.kinds:
                    ious['3d'] = boxes_iou_3d_from_bev(a, b, iou_bev).numpy()
                frame.append(dict(ious=ious, scores=scores[p].numpy(), gt_ignored=ignored[g].numpy()))
            self.results.append(frame)

    def compute_metrics(self, results):
        """AP per class, kind and threshold, plus mAPs; logs a table."""
        if self.kitti_scoring:
            metrics, rows = kitti_metrics(results, self.classes, self.thresholds, self.kinds, self.difficulties)
            print_log(kitti_table(metrics, rows, self.thresholds, self.kinds), logger='current')
            return metrics
        metrics, rows = {}, []
        for c, name in enumerate(self.classes):
            per_class = [frame[c] for frame in results]
            num_gt = int(sum((~f['gt_ignored']).sum() for f in per_class))
            num_ignored = int(sum(f['gt_ignored'].sum() for f in per_class))
            num_pred = int(sum(f['scores'].size for f in per_class))
            row = [name, num_gt, num_ignored, num_pred]
            for kind in self.kinds:
                for thr in self.thresholds(name):
                    ap = self._class_ap(per_class, kind, thr, num_gt)
                    metrics[f'{name}_{kind.upper()}_AP@{thr:g}'] = ap
                    row.append(ap)
            rows.append(row)
        for kind in self.kinds:
            for level, suffix in enumerate(('', '_loose')):
                values = [metrics[f'{n}_{kind.upper()}_AP@{self.thresholds(n)[level]:g}'] for n in self.classes
                          if len(self.thresholds(n)) > level]
                values = [v for v in values if not math.isnan(v)]
                if values:
                    metrics[f'{kind.upper()}_mAP{suffix}'] = float(np.mean(values))
        print_log(self._table(rows), logger='current')
        return metrics

    def _class_ap(self, per_class, kind, thr, num_gt):
        scores, flags = [], []
        for frame in per_class:
            is_tp, is_ignored = match_detections(frame['ious'][kind], frame['scores'], thr, frame['gt_ignored'])
            scores.append(frame['scores'][~is_ignored])
            flags.append(is_tp[~is_ignored])
        return average_precision_r40(np.concatenate(scores) if scores else np.zeros(0),
                                     np.concatenate(flags) if flags else np.zeros(0, bool), num_gt)

    def _table(self, rows):
        lines = []
        for row in rows:
            name = row[0]
            labels = [f'{kind.upper()}@{t:g}' for kind in self.kinds for t in self.thresholds(name)]
            cells = [f'{name:<12}', f'gt {row[1]:>5}', f'ignored {row[2]:>4}', f'pred {row[3]:>6}']
            cells += [f'{label} {value * 100:6.2f}' if not math.isnan(value) else f'{label}    n/a'
                      for label, value in zip(labels, row[4:])]
            lines.append(' | '.join(cells))
        return 'KITTI-style AP (R40, %):\n' + '\n'.join(lines)
