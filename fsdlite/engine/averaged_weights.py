"""The weights a run hands on: the moving average of mmengine's ``EMAHook`` where the config has one.

mmengine validates with the averaged weights and writes them into every checkpoint's ``state_dict`` (what
``init_model``, ``tools/test.py`` and ``tools/infer.py`` load), but after ``runner.train()`` the model in memory holds
the raw weights of the last iteration. :func:`use_averaged_weights` makes the in-memory model match the checkpoint,
for tools that go on with the trained model (``tools/demo.py``).
"""
from mmengine.hooks import EMAHook

from .tool_setup import runner_model


def use_averaged_weights(runner):
    """Copy the averaged parameters (and buffers, with ``update_buffers``) of the run's ``EMAHook`` into its model.

    Args:
        runner (mmengine.runner.Runner): a runner after ``train()``.
    Returns:
        bool: True when the run had an ``EMAHook`` (the model now holds its averages), False when it had none (the
        model is left as it is).
    """
    hooks = [hook for hook in runner.hooks if isinstance(hook, EMAHook)]
    if not hooks:
        return False
    runner_model(runner).load_state_dict(hooks[-1].ema_model.module.state_dict())
    return True


__all__ = ['use_averaged_weights']
