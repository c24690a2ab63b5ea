"""Warm-up of FSD-style detectors: top-k foreground before thresholded detection is enabled.

Early in training the segmentation scores are meaningless, so thresholding them gives either no
foreground or nearly every point (and huge connected-component problems).  Before
``enable_after_iter`` the hook asks the model to keep each class's top-k points per sample
(``fg_mode='topk'``); afterwards it switches to score thresholds, lowered by ``threshold_buffer``
at first and raised linearly to the configured thresholds over ``buffer_iter`` iterations.
"""
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper

from ..registry import HOOKS


def warmup_state(iteration, enable_after_iter, threshold_buffer, buffer_iter):
    """``(fg_mode, threshold_offset)`` at a training iteration (see the module docstring)."""
    if iteration < enable_after_iter:
        return 'topk', 0.0
    if buffer_iter <= 0:
        return 'threshold', 0.0
    progress = min(1.0, (iteration - enable_after_iter) / buffer_iter)
    return 'threshold', threshold_buffer * (1.0 - progress)


@HOOKS.register_module()
class FSDWarmupHook(Hook):
    """Sets ``model.runtime_info`` (``fg_mode``, ``threshold_offset``) before every training iteration.

    Args:
        enable_after_iter (int): iterations of top-k foreground before thresholds are used.
        threshold_buffer (float): how much the thresholds are lowered right after enabling.
        buffer_iter (int): iterations over which the lowering decays to zero.
    """

    priority = 'NORMAL'

    def __init__(self, enable_after_iter=200, threshold_buffer=0.2, buffer_iter=200):
        if int(enable_after_iter) < 0 or int(buffer_iter) < 0 or not 0 <= float(threshold_buffer) < 1:
            raise ValueError(f'FSDWarmupHook: need enable_after_iter >= 0, buffer_iter >= 0 and 0 <= threshold_buffer '
                             f'< 1, got {enable_after_iter}, {buffer_iter}, {threshold_buffer}')
        self.enable_after_iter = int(enable_after_iter)
        self.threshold_buffer = float(threshold_buffer)
        self.buffer_iter = int(buffer_iter)

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        """Update ``model.runtime_info`` with :func:`warmup_state` at ``runner.iter``.

        Raises:
            TypeError: the (unwrapped) model has no ``runtime_info``.
        """
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        if not hasattr(model, 'runtime_info'):
            raise TypeError(f'FSDWarmupHook: the model {type(model).__name__} has no runtime_info '
                            '(use it with FSD-lite / FSDv2-lite detectors)')
        mode, offset = warmup_state(runner.iter, self.enable_after_iter, self.threshold_buffer, self.buffer_iter)
        model.runtime_info.update(fg_mode=mode, threshold_offset=offset)
