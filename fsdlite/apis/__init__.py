"""A trained model on a user's own files: :func:`init_model`, :func:`inference_detector`."""
from .evaluation import predict_item, score_samples
from .inference import frame_points, inference_detector, init_model

__all__ = ['init_model', 'inference_detector', 'frame_points', 'predict_item', 'score_samples']
