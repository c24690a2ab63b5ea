"""Point segmentation metric: confusion matrix -> per-class IoU, mIoU, foreground IoU, accuracy."""
import logging

import numpy as np
import torch
from mmengine.evaluator import BaseMetric
from mmengine.logging import print_log

from fsdlite.registry import METRICS

from ._class_names import ClassNamesMixin


def confusion_matrix(gt, pred, num_labels, ignore_index=None):
    """(K, K) int64 confusion matrix, rows = ground truth, columns = prediction.

    Args:
        gt (array | Tensor): (N,) int ground-truth labels in ``[0, K)`` or ``ignore_index``.
        pred (array | Tensor): (N,) int predicted labels in ``[0, K)``.
        num_labels (int): K.
        ignore_index (int | None): ground-truth value to skip.
    """
    gt = _as_numpy(gt, 'gt')
    pred = _as_numpy(pred, 'pred')
    if gt.shape != pred.shape:
        raise ValueError(f'gt and pred must have the same shape, got {gt.shape} and {pred.shape}')
    if ignore_index is not None:
        keep = gt != ignore_index
        gt, pred = gt[keep], pred[keep]
    for name, v in (('gt', gt), ('pred', pred)):
        if v.size and (v.min() < 0 or v.max() >= num_labels):
            raise ValueError(f'{name} labels must lie in [0, {num_labels}) (ignore_index={ignore_index}), got values '
                             f'in [{v.min()}, {v.max()}]')
    return np.bincount(gt * num_labels + pred, minlength=num_labels * num_labels).reshape(num_labels, num_labels)


def _as_numpy(x, name):
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
        raise TypeError(f'{name} must be a 1-D integer array of labels, got dtype {x.dtype} shape {x.shape}')
    return x.astype(np.int64)


def iou_from_confusion(cm):
    """(K,) IoU per label: TP / (TP + FP + FN); NaN where a label is absent in both gt and pred."""
    cm = np.asarray(cm, dtype=np.float64)
    tp = np.diag(cm)
    denom = cm.sum(0) + cm.sum(1) - tp
    with np.errstate(invalid='ignore', divide='ignore'):
        return np.where(denom > 0, tp / denom, np.nan)


@METRICS.register_module()
class SegMetric(ClassNamesMixin, BaseMetric):
    """Per-class IoU from a confusion matrix accumulated over points (generic over datasets).

    Label convention (``Det3DDataSample``): ``0..C-1`` are classes; with ``with_background`` the value
    C means background and gets its own row.  Ground-truth points equal to ``ignore_index`` are skipped.

    Reported (under ``prefix``, default 'seg'): ``IoU_<class>`` for every class (and ``IoU_background``),
    ``mIoU`` (mean over the C classes, absent classes skipped), ``fg_IoU`` (all classes merged into one
    foreground vs background; only with background), ``acc`` (point accuracy).  A table with IoU,
    precision, recall and point counts per class is printed.

    Args:
        classes (Sequence[str] | None): class names; default ``dataset_meta['classes']``.
        with_background (bool): label C is background.
        ignore_index (int | None): ground-truth label to skip.
        collect_device (str): mmengine collection device.
        prefix (str | None): key prefix.
    """
    default_prefix = 'seg'

    def __init__(self, classes=None, with_background=True, ignore_index=-1, collect_device='cpu', prefix=None):
        super().__init__(collect_device=collect_device, prefix=prefix)
        self._set_classes(classes)
        self.with_background = bool(with_background)
        self.ignore_index = ignore_index

    @property
    def label_names(self):
        """Names of the K confusion-matrix labels."""
        return self.classes + (('background',) if self.with_background else ())

    def process(self, data_batch, data_samples):
        """Accumulate one confusion matrix per sample (``gt_pts_seg`` vs ``pred_pts_seg``)."""
        k = len(self.label_names)
        for i, sample in enumerate(data_samples):
            try:
                gt = sample['gt_pts_seg']['pts_semantic_mask']
                pred = sample['pred_pts_seg']['pts_semantic_mask']
            except (KeyError, TypeError):
                raise KeyError(f'SegMetric: data sample {i} needs gt_pts_seg.pts_semantic_mask and '
                               'pred_pts_seg.pts_semantic_mask') from None
            self.results.append(confusion_matrix(gt, pred, k, self.ignore_index))

    def compute_metrics(self, results):
        """Reduce the collected confusion matrices into the metric dict (and print the table)."""
        names = self.label_names
        cm = np.sum(results, axis=0) if results else np.zeros((len(names), len(names)), np.int64)
        return self.metrics_from_confusion(cm)

    def metrics_from_confusion(self, cm):
        """Metric dict of a (K, K) confusion matrix; prints the per-class table."""
        names = self.label_names
        cm = np.asarray(cm, dtype=np.int64)
        if cm.shape != (len(names), len(names)):
            raise ValueError(f'confusion matrix must be {len(names)}x{len(names)} for labels {names}, got {cm.shape}')
        iou = iou_from_confusion(cm)
        num_classes = len(self.classes)
        out = {f'IoU_{n}': float(v) for n, v in zip(names, iou)}
        fg = iou[:num_classes]
        out['mIoU'] = float(np.nanmean(fg)) if np.isfinite(fg).any() else float('nan')
        if self.with_background:
            out['fg_IoU'] = float(iou_from_confusion(_merge_foreground(cm, num_classes))[0])
        total = cm.sum()
        out['acc'] = float(np.trace(cm) / total) if total else float('nan')
        print_log('\n' + format_seg_table(cm, names, iou, out), logger='current', level=logging.INFO)
        return out


def _merge_foreground(cm, num_classes):
    """2x2 confusion of foreground (labels < num_classes) vs background."""
    fg_fg = cm[:num_classes, :num_classes].sum()
    fg_bg = cm[:num_classes, num_classes:].sum()
    bg_fg = cm[num_classes:, :num_classes].sum()
    bg_bg = cm[num_classes:, num_classes:].sum()
    return np.array([[fg_fg, fg_bg], [bg_fg, bg_bg]])


def format_seg_table(cm, names, iou, summary):
    """Plain-text table: label, IoU, precision, recall, gt points, predicted points; then the summary."""
    gt_count, pred_count, tp = cm.sum(1), cm.sum(0), np.diag(cm)
    width = max(10, max(len(n) for n in names))
    lines = [f'{"class":<{width}} {"IoU":>7} {"prec":>7} {"recall":>7} {"gt pts":>10} {"pred pts":>10}']
    for i, name in enumerate(names):
        prec = tp[i] / pred_count[i] if pred_count[i] else float('nan')
        rec = tp[i] / gt_count[i] if gt_count[i] else float('nan')
        lines.append(f'{name:<{width}} {iou[i]:7.4f} {prec:7.4f} {rec:7.4f} {gt_count[i]:10d} {pred_count[i]:10d}')
    lines.append('  '.join(f'{k}={v:.4f}' for k, v in summary.items() if not k.startswith('IoU_')))
    return '\n'.join(lines)


__all__ = ['SegMetric', 'confusion_matrix', 'iou_from_confusion', 'format_seg_table']
