"""Muon-tomography metric: per-voxel material accuracy and block-vs-background ROC AUC, next to a
physics baseline computed on the same volumes.

* **Model**: the predicted class (argmax, or for an X0 regression head the class whose log X0 is
  nearest) gives the accuracy; the per-voxel score is the predicted log X0 (expected under the class
  probabilities for a classification head).
* **Baseline**: the per-voxel mean log scattering angle of the muons whose PoCA falls in the voxel
  (``gt_pts_seg.baseline_score`` from the dataset).  Voxels without any PoCA get their volume's median
  score (no evidence of a difference; their number is reported as ``baseline_empty_voxels``).  Its
  classes come from thresholds halfway between the per-class medians of the score, fitted on the other
  half of the held-out volumes (2-fold cross-fitting: even volumes fit, odd evaluate, and vice versa).
* **Block-vs-background ROC AUC**: the score of each voxel minus its volume's median score, in absolute
  value (a block differs from the surrounding background, lighter or heavier), pooled over all voxels.
"""
import numpy as np
import torch
from mmengine.evaluator import BaseMetric
from mmengine.structures import BaseDataElement

from fsdlite.datasets.muon.materials import RADIATION_LENGTH_M
from fsdlite.registry import METRICS


def roc_auc(scores, labels):
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties).

    Args:
        scores (array): (N,) real scores, higher = more likely positive.
        labels (array): (N,) bool.
    Returns:
        float: AUC in [0, 1]; NaN when one class is absent.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=bool)
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        return float('nan')
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    starts = np.cumsum(counts) - counts
    ranks = (starts + (counts + 1) / 2.0)[inverse]          # 1-based average ranks
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def deviation_from_median(score):
    """|score - median(score)| of one volume's voxels (NaN entries replaced by the median first)."""
    score = np.asarray(score, dtype=np.float64)
    defined = ~np.isnan(score)
    median = np.median(score[defined]) if defined.any() else 0.0
    return np.abs(np.where(defined, score, median) - median)


def nearest_class(values, centres):
    """Index of the nearest centre for every value (centres may contain NaN = unavailable class)."""
    centres = np.asarray(centres, dtype=np.float64)
    dist = np.abs(np.asarray(values, dtype=np.float64)[:, None] - centres[None, :])
    return np.where(np.isnan(dist), np.inf, dist).argmin(1)


def cross_fitted_baseline_classes(volumes, num_classes):
    """Baseline class per voxel: nearest per-class median of the score fitted on the other fold."""
    preds = [None] * len(volumes)
    for fold in (0, 1):
        fit = [v for i, v in enumerate(volumes) if i % 2 != fold]
        medians = np.full(num_classes, np.nan)
        if fit:
            score = np.concatenate([v['baseline'] for v in fit])
            labels = np.concatenate([v['labels'] for v in fit])
            for c in range(num_classes):
                chosen = score[(labels == c) & ~np.isnan(score)]
                if chosen.size:
                    medians[c] = np.median(chosen)
        for i, v in enumerate(volumes):
            if i % 2 == fold:
                filled = np.where(np.isnan(v['baseline']), np.nanmedian(v['baseline']) if
                                  (~np.isnan(v['baseline'])).any() else 0.0, v['baseline'])
                preds[i] = nearest_class(filled, medians) if not np.isnan(medians).all() else \
                    np.full(filled.shape, -1)
    return preds


def _field(container, name):
    if isinstance(container, BaseDataElement):
        return getattr(container, name)
    return container[name]


def _numpy(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@METRICS.register_module()
class VoxelMaterialMetric(BaseMetric):
    """Accuracy and block ROC AUC of a VoxelNet, and of the PoCA scattering baseline, on the same volumes.

    Args:
        classes (tuple[str], optional): material names (defaults to ``dataset_meta['classes']``); their
            radiation lengths give the per-class log X0.
        prefix (str): metric name prefix (default 'voxel').
    Reports:
        ``accuracy``, ``block_auc``, ``baseline_accuracy``, ``baseline_block_auc``, ``auc_gain`` (model -
        baseline), ``baseline_empty_voxels`` (fraction of voxels without PoCA), ``num_voxels``.
    """

    default_prefix = 'voxel'

    def __init__(self, classes=None, collect_device='cpu', prefix=None):
        super().__init__(collect_device=collect_device, prefix=prefix)
        self._classes = tuple(classes) if classes is not None else None

    @property
    def classes(self):
        """Material names (``classes`` argument, else ``dataset_meta['classes']``); ValueError if none."""
        classes = self._classes or (self.dataset_meta or {}).get('classes')
        if not classes:
            raise ValueError('VoxelMaterialMetric: no material classes: pass classes=... or evaluate a dataset '
                             'whose metainfo has "classes"')
        return tuple(classes)

    def process(self, data_batch, data_samples):
        """Collect labels, block masks, predictions and baseline scores of every volume."""
        for sample in data_samples:
            gt, pred = _field(sample, 'gt_pts_seg'), _field(sample, 'pred_pts_seg')
            labels = _numpy(_field(gt, 'pts_semantic_mask')).astype(np.int64)
            item = dict(labels=labels, block=_numpy(_field(gt, 'block_mask')).astype(bool),
                        baseline=_numpy(_field(gt, 'baseline_score')).astype(np.float64))
            try:
                item['scores'] = _numpy(_field(pred, 'pts_scores')).astype(np.float64)
            except (AttributeError, KeyError):
                item['log_x0'] = _numpy(_field(pred, 'log_x0')).astype(np.float64)
            for key in ('block', 'baseline') + (('scores',) if 'scores' in item else ('log_x0',)):
                if item[key].shape[0] != labels.shape[0]:
                    raise ValueError(f'VoxelMaterialMetric: {key} has {item[key].shape[0]} voxels but the labels '
                                     f'have {labels.shape[0]}')
            self.results.append(item)

    def compute_metrics(self, results):
        """The metrics listed in the class docstring, pooled over every collected volume."""
        log_x0 = np.log(np.array([RADIATION_LENGTH_M[c] for c in self.classes]))
        model_pred, model_dev, base_dev = [], [], []
        for item in results:
            if 'scores' in item:
                score = item['scores'] @ log_x0
                model_pred.append(item['scores'].argmax(1))
            else:
                score = item['log_x0']
                model_pred.append(nearest_class(score, log_x0))
            model_dev.append(deviation_from_median(score))
            base_dev.append(deviation_from_median(item['baseline']))
        base_pred = cross_fitted_baseline_classes(results, len(self.classes))
        labels = np.concatenate([r['labels'] for r in results])
        block = np.concatenate([r['block'] for r in results])
        model_auc = roc_auc(np.concatenate(model_dev), block)
        base_auc = roc_auc(np.concatenate(base_dev), block)
        return dict(accuracy=float((np.concatenate(model_pred) == labels).mean()), block_auc=model_auc,
                    baseline_accuracy=float((np.concatenate(base_pred) == labels).mean()),
                    baseline_block_auc=base_auc, auc_gain=model_auc - base_auc,
                    baseline_empty_voxels=float(np.isnan(np.concatenate([r['baseline'] for r in results])).mean()),
                    num_voxels=int(labels.size))
