"""KITTI's own scoring for :class:`~fsdlite.evaluation.metrics.det_metric.DetMetric` (``kitti_scoring=True``).

Per frame it needs the metainfo the KITTI-format datasets write: ``kitti_annos`` (every labelled object with its
type, lidar box, 2D box, truncation and occlusion; DontCare regions included) and ``lidar2img`` (+ ``image_size``)
to give each predicted box the 2D box a KITTI result line would carry. The protocol itself is in
:mod:`fsdlite.evaluation.functional.kitti_eval`.
"""
import math

import numpy as np
import torch

from ...structures.camera import KITTI_IMAGE_SIZE, image_boxes
from ..functional.box_overlap import boxes_iou_3d_from_bev
from ..functional.kitti_eval import (DIFFICULTIES, clean_frame, dontcare_cover, frame_curve, interpolated_ap,
                                     pooled_curve)

FALSE_BOX_SCORE = 0.5  # false boxes per frame are counted among predictions scoring at least this


def _meta(sample, name):
    meta = sample if isinstance(sample, dict) else sample.metainfo
    if name not in meta:
        raise KeyError(f"DetMetric(kitti_scoring=True): every data sample needs metainfo {name!r} (a KITTI-format "
                       f"dataset: KittiDataset or SyntheticLidarDataset); this one has {sorted(meta)}")
    return meta[name]


def frame_record(sample, boxes, scores, labels, classes, kinds, iou_bev):
    """What the scoring keeps of one frame: per class the predictions' scores, their IoU with the class's (and
    its neighbours') ground truth per kind, and the cleaning per difficulty.

    Args:
        sample: a data sample (dict or data element) with ``kitti_annos`` and ``lidar2img`` metainfo.
        boxes (Tensor): (D, 7) predicted lidar boxes; scores (D,), labels (D,).
        classes (tuple): class names in label order; kinds (tuple): 'bev' and/or '3d'.
        iou_bev (callable): rotated BEV IoU of (N, 7) and (M, 7) float32 boxes -> (N, M).
    """
    annos = _meta(sample, 'kitti_annos')
    lidar2img = _meta(sample, 'lidar2img')
    meta = sample if isinstance(sample, dict) else sample.metainfo
    image_size = meta.get('image_size', KITTI_IMAGE_SIZE)
    det_bbox, _ = image_boxes(boxes, lidar2img, image_size)
    share = dontcare_cover(det_bbox, np.asarray(annos['bbox'])[np.char.lower(np.asarray(annos['name']).astype(str))
                                                               == 'dontcare'])
    gt_boxes = torch.as_tensor(np.asarray(annos['box_lidar'], dtype=np.float32)).reshape(-1, 7)
    low = np.floor(np.abs(det_bbox[:, 3] - det_bbox[:, 1])) < max(v[0] for v in DIFFICULTIES.values())
    record = {}
    for c, name in enumerate(classes):
        mine = (labels == c).numpy()
        cleaned = {d: clean_frame(annos['name'], annos['bbox'], annos['occluded'], annos['truncated'], det_bbox, mine,
                                  name, d) for d in DIFFICULTIES}
        candidates = np.flatnonzero(mine | low)  # every detection that takes part at some difficulty
        rows = torch.as_tensor(cleaned['moderate']['gt_rows'], dtype=torch.long)
        a, b = boxes[torch.as_tensor(candidates, dtype=torch.long)].float(), gt_boxes[rows]
        bev = iou_bev(a, b) if len(a) and len(b) else torch.zeros((len(a), len(b)))
        ious = {'bev': bev.numpy()}
        if '3d' in kinds:
            ious['3d'] = boxes_iou_3d_from_bev(a, b, bev).numpy()
        position = np.full(len(mine), -1)
        position[candidates] = np.arange(len(candidates))
        record[name] = dict(scores=scores.numpy()[candidates], ious=ious, dontcare=share[candidates],
                            num_pred=int(mine.sum()),
                            cleaned={d: (position[v['det_rows']], v['ignored_gt'], v['ignored_det'])
                                     for d, v in cleaned.items()})
    return record


def class_curve(records, name, kind, threshold, difficulty):
    """Pooled ``(thresholds, tp, fp, fn, num_gt)`` of a class over the frames' records."""
    curves = []
    for record in records:
        r = record[name]
        dets, ignored_gt, ignored_det = r['cleaned'][difficulty]
        curves.append(frame_curve(r['ious'][kind][dets], r['scores'][dets], threshold, ignored_gt, ignored_det,
                                  r['dontcare'][dets]))
    return pooled_curve(curves)


def kitti_metrics(records, classes, thresholds_of, kinds, difficulties):
    """AP (interpolated R40) per class, kind, IoU threshold and difficulty; mAPs and false boxes per frame.

    Returns:
        tuple: ``metrics`` dict (keys ``{class}_{BEV|3D}_AP@{thr}`` for moderate, ``..._{easy|hard}`` for the
        others, ``{BEV|3D}_mAP[_loose]`` (moderate), ``{class}_false_boxes_per_frame`` (moderate, BEV, the loose
        threshold, predictions scoring >= 0.5) and ``{class}_num_gt`` (moderate)) and the table rows.
    """
    metrics, rows = {}, []
    for name in classes:
        row = dict(name=name)
        for difficulty in difficulties:
            suffix = '' if difficulty == 'moderate' else f'_{difficulty}'
            for kind in kinds:
                for thr in thresholds_of(name):
                    _, tp, fp, fn, num_gt = class_curve(records, name, kind, thr, difficulty)
                    ap = interpolated_ap(tp, fp, fn) if num_gt else math.nan
                    metrics[f'{name}_{kind.upper()}_AP@{thr:g}{suffix}'] = ap
        loose = thresholds_of(name)[-1]
        t, tp, fp, fn, num_gt = class_curve(records, name, 'bev', loose, 'moderate')
        confident = np.flatnonzero(t >= FALSE_BOX_SCORE)
        false_boxes = float(fp[confident[-1]]) / max(len(records), 1) if len(confident) else 0.0
        metrics[f'{name}_false_boxes_per_frame'] = false_boxes
        metrics[f'{name}_num_gt'] = num_gt
        row.update(num_gt=num_gt, num_pred=int(sum(r[name]['num_pred'] for r in records)), false_boxes=false_boxes)
        rows.append(row)
    for kind in kinds:
        for level, suffix in enumerate(('', '_loose')):
            values = [metrics[f'{n}_{kind.upper()}_AP@{thresholds_of(n)[level]:g}'] for n in classes
                      if len(thresholds_of(n)) > level]
            values = [v for v in values if not math.isnan(v)]
            if values:
                metrics[f'{kind.upper()}_mAP{suffix}'] = float(np.mean(values))
    return metrics, rows


def kitti_table(metrics, rows, thresholds_of, kinds):
    """The log table: per class ground truth (moderate), predictions, moderate APs and false boxes per frame."""
    lines = ['KITTI scoring (moderate, interpolated R40, %):']
    for row in rows:
        name = row['name']
        cells = [f"{name:<12}", f"gt {row['num_gt']:>4}", f"pred {row['num_pred']:>6}"]
        for kind in kinds:
            for thr in thresholds_of(name):
                value = metrics[f'{name}_{kind.upper()}_AP@{thr:g}']
                text = f'{100 * value:6.2f}' if not math.isnan(value) else '   n/a'
                cells.append(f'{kind.upper()}@{thr:g} {text}')
        cells.append(f"false boxes/frame (score>={FALSE_BOX_SCORE:g}) {row['false_boxes']:.2f}")
        lines.append(' | '.join(cells))
    return '\n'.join(lines)


__all__ = ['frame_record', 'class_curve', 'kitti_metrics', 'kitti_table', 'FALSE_BOX_SCORE']
