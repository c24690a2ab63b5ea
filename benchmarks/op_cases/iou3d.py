"""BEV IoU and NMS: the C++ ops vs the numpy polygon-clipping reference / reference greedy NMS.

Boxes imitate a detector's raw output before NMS: ~16 jittered detections per object, objects
(car/ped/cyclist sizes) spread over a 150 m x 150 m scene, random scores; 1k-5k boxes.
IoU is N x N; NMS uses FSD's test setting (rotated, IoU 0.25, at most 500 kept per sample).
"""
import numpy as np
import torch

from op_cases._scaffold import case

LABELS = ('fsdlite.ops', 'reference')


def detections(n, seed=0, batches=1):
    """(boxes (n, 7) float32, scores (n,), labels (n,) in 0..2, batch (n,))."""
    g = np.random.default_rng(seed)
    objects = max(1, n // 16)
    cls = g.integers(0, 3, size=objects)
    dims = np.array([[4.5, 1.9, 1.6], [0.8, 0.8, 1.7], [1.8, 0.7, 1.6]])[cls]
    centre = np.concatenate([g.uniform(-75, 75, size=(objects, 2)), np.full((objects, 1), -1.0)], 1)
    yaw = g.uniform(-np.pi, np.pi, size=(objects, 1))
    base = np.concatenate([centre, dims, yaw], 1)
    pick = g.integers(0, objects, size=n)
    jitter = g.normal(size=(n, 7)) * np.array([0.3, 0.3, 0.1, 0.3, 0.15, 0.1, 0.15])
    boxes = base[pick] + jitter
    boxes[:, 3:6] = np.abs(boxes[:, 3:6])
    batch = g.integers(0, batches, size=objects)[pick]
    return (torch.from_numpy(boxes.astype(np.float32)), torch.from_numpy(g.random(n).astype(np.float32)),
            torch.from_numpy(cls[pick]), torch.from_numpy(batch))


def work(variant, op, n):
    """Zero-arg callable for one (variant, op, size) (also used by run_isolated)."""
    from fsdlite.ops import batched_nms_bev, boxes_iou_bev, boxes_iou_bev_aligned, nms_bev
    from fsdlite.ops.iou3d.reference import boxes_iou_bev_reference, nms_bev_reference
    boxes, scores, labels, batch = detections(n, batches=2 if op == 'batched_nms_bev' else 1)
    ours = variant == 'fsdlite.ops'
    if op == 'boxes_iou_bev':
        return (lambda: boxes_iou_bev(boxes, boxes)) if ours else (lambda: boxes_iou_bev_reference(boxes, boxes))
    if op == 'boxes_iou_bev_aligned':
        return (lambda: boxes_iou_bev_aligned(boxes, boxes)) if ours else \
            (lambda: boxes_iou_bev_reference(boxes, boxes, axis_aligned=True))
    if op == 'nms_bev':
        return (lambda: nms_bev(boxes, scores, 0.25, post_max=500)) if ours else \
            (lambda: nms_bev_reference(boxes, scores, 0.25, post_max=500))
    return (lambda: batched_nms_bev(boxes, scores, labels, 0.25, pre_max=4096, post_max=500, batch=batch)) if ours \
        else (lambda: nms_bev_reference(boxes, scores, 0.25, labels=labels, batch=batch, pre_max=4096, post_max=500))


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): ``boxes_iou_bev`` (1k, 5k), ``boxes_iou_bev_aligned``,
    ``nms_bev`` (1k, 5k), ``batched_nms_bev``; ``quick``: 500-box IoU and NMS."""
    plan = [('boxes_iou_bev', 500), ('nms_bev', 500)] if quick else [
        ('boxes_iou_bev', 1000), ('boxes_iou_bev', 5000), ('boxes_iou_bev_aligned', 5000),
        ('nms_bev', 1000), ('nms_bev', 5000), ('batched_nms_bev', 5000)]
    out = []
    for op, n in plan:
        size = f'{n}x{n} boxes' if op.startswith('boxes') else (f'{n} boxes, 3 cls, 2 samples' if op.startswith(
            'batched') else f'{n} boxes')
        out.append(case(op, size, work, LABELS, 'reference', op=op, n=n))
    return out
