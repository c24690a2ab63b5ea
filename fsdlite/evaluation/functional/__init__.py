"""Evaluation math without registries: detection matching, R40 average precision, 3D IoU from BEV IoU."""
from .ap import average_precision_r40, match_detections, precision_recall
from .box_overlap import boxes_iou_3d_from_bev

__all__ = ['average_precision_r40', 'match_detections', 'precision_recall', 'boxes_iou_3d_from_bev']
