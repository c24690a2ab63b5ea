"""A model's predictions on a built dataset, and a config's metric on them (the demo's and sim2real's scoring)."""
import torch
from mmengine.dataset import pseudo_collate

from ..registry import METRICS


def predict_item(model, dataset, index):
    """Run ``model.test_step`` on item ``index`` of ``dataset``.

    Returns:
        tuple: the item's points (N, C) after the dataset's pipeline, and its data sample with the ground truth
        and ``pred_instances_3d`` (detectors) or ``pred_pts_seg`` (segmentors).
    """
    item = dataset[index]
    with torch.no_grad():
        sample = model.test_step(pseudo_collate([item]))[0]
    return item['inputs']['points'], sample


def score_samples(evaluator_cfg, samples, classes):
    """The metric of ``evaluator_cfg`` (e.g. a config's ``test_evaluator``: DetMetric, SegMetric) on ``samples``.

    Args:
        evaluator_cfg (dict): metric config.
        samples (list[Det3DDataSample]): predicted data samples with their ground truth.
        classes (sequence[str]): class names (the metric's ``dataset_meta``).
    Returns:
        dict: metric name -> value.
    """
    metric = METRICS.build(dict(evaluator_cfg))
    metric.dataset_meta = dict(classes=tuple(classes))
    metric.process(None, [s.to_dict() for s in samples])
    return metric.compute_metrics(metric.results)


__all__ = ['predict_item', 'score_samples']
