"""Classification metric: overall accuracy, per-class accuracy and mean class accuracy."""
import logging

import numpy as np
from mmengine.evaluator import BaseMetric
from mmengine.logging import print_log

from fsdlite.registry import METRICS

from ._class_names import ClassNamesMixin


def _label(sample, key, index):
    try:
        value = sample[key]
    except (KeyError, TypeError):
        raise KeyError(f'ClsMetric: data sample {index} has no {key!r}') from None
    value = np.asarray(value.detach().cpu() if hasattr(value, 'detach') else value)
    if value.size != 1 or not np.issubdtype(value.dtype, np.integer):
        raise ValueError(f'ClsMetric: data sample {index} {key} must be one integer label, got {value!r}')
    return int(value.reshape(()))


@METRICS.register_module()
class ClsMetric(ClassNamesMixin, BaseMetric):
    """Accuracy of per-sample class predictions (``pred_label`` vs ``gt_label``).

    Reported (prefix 'cls'): ``acc`` (overall), ``mAcc`` (mean over classes present in the ground
    truth) and ``acc_<class>`` per class; a confusion table is printed.

    Args:
        classes (Sequence[str] | None): class names; default ``dataset_meta['classes']``.
        collect_device (str), prefix (str | None): as :class:`mmengine.evaluator.BaseMetric`.
    """
    default_prefix = 'cls'

    def __init__(self, classes=None, collect_device='cpu', prefix=None):
        super().__init__(collect_device=collect_device, prefix=prefix)
        self._set_classes(classes)

    def process(self, data_batch, data_samples):
        """Collect (ground truth, prediction) label pairs."""
        for i, sample in enumerate(data_samples):
            self.results.append((_label(sample, 'gt_label', i), _label(sample, 'pred_label', i)))

    def compute_metrics(self, results):
        """``acc``, ``mAcc`` and ``acc_<class>`` from the (gt, pred) pairs; logs the confusion table.

        Raises:
            ValueError: a label outside ``[0, len(classes))``.
        """
        names = self.classes
        k = len(names)
        pairs = np.asarray(results, dtype=np.int64).reshape(-1, 2)
        if pairs.size and (pairs.min() < 0 or pairs.max() >= k):
            raise ValueError(f'ClsMetric: labels must lie in [0, {k}) for classes {names}, got [{pairs.min()}, '
                             f'{pairs.max()}]')
        cm = np.bincount(pairs[:, 0] * k + pairs[:, 1], minlength=k * k).reshape(k, k)
        support = cm.sum(1)
        with np.errstate(invalid='ignore', divide='ignore'):
            per_class = np.where(support > 0, np.diag(cm) / support, np.nan)
        out = {'acc': float(np.trace(cm) / cm.sum()) if cm.sum() else float('nan'),
               'mAcc': float(np.nanmean(per_class)) if np.isfinite(per_class).any() else float('nan')}
        out.update({f'acc_{n}': float(v) for n, v in zip(names, per_class)})
        width = max(8, max(len(n) for n in names))
        corner = 'gt/pred'
        lines = [f'{corner:<{width}} ' + ' '.join(f'{n[:7]:>7}' for n in names) + '     acc']
        for n, row, a in zip(names, cm, per_class):
            lines.append(f'{n:<{width}} ' + ' '.join(f'{v:7d}' for v in row) + f' {a:7.4f}')
        lines.append(f'acc={out["acc"]:.4f}  mAcc={out["mAcc"]:.4f}  samples={int(cm.sum())}')
        print_log('\n' + '\n'.join(lines), logger='current', level=logging.INFO)
        return out
