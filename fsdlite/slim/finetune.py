"""Fine-tuning and evaluation of a (slimmed) model with the config's own training schedule (mmengine Runner)."""
import copy
import os.path as osp

from mmengine.config import Config

from ..engine.schedule import rescale_schedule
from ..engine.tool_setup import build_runner, prepare_runner_cfg
from .distill import distill_hook_cfg
from .errors import is_finite_positive


def finetune(config_path, checkpoint, iters, work_dir, cfg_options=None, lr=None, distill=None):
    """Train ``config_path`` from ``checkpoint`` for ``iters`` iterations of its (rescaled) schedule.

    ``lr`` (a finite float > 0), when given, replaces the optimizer's peak learning rate (the schedule scales it
    as it scales the config's). ``distill``, when given, is ``dict(teacher_config=..., teacher_checkpoint=...,
    module=..., weight=1.0)``: the original model teaches that submodule's outputs during the fine-tune
    (:class:`fsdlite.slim.distill.SlimDistillHook`; its CPU time is part of the fine-tune's). Validation during
    training is switched off (evaluate afterwards with :func:`evaluate`); hooks keep their settings. Returns the
    path of the final checkpoint.
    """
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f'--finetune expects a positive number of iterations, got {iters!r}')
    if lr is not None and not is_finite_positive(lr):
        raise ValueError(f'--finetune-lr expects a finite learning rate > 0, got {lr!r}')
    hook = None
    if distill is not None:
        if not isinstance(distill, dict) or not {'teacher_config', 'teacher_checkpoint', 'module'} <= set(distill):
            raise ValueError('distill expects dict(teacher_config=..., teacher_checkpoint=..., module=...[, weight]), '
                             f'got {distill!r}')
        hook = distill_hook_cfg(**distill)
    cfg = Config.fromfile(config_path)
    if cfg_options:
        cfg.merge_from_dict(copy.deepcopy(cfg_options))
    if hook is not None:
        cfg.custom_hooks = list(cfg.get('custom_hooks') or []) + [hook]
    if lr is not None:
        cfg.optim_wrapper.optimizer.lr = float(lr)
    prepare_runner_cfg(cfg, config_path, work_dir)
    rescale_schedule(cfg, iters)
    cfg.train_cfg.val_interval = iters
    cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    cfg.load_from, cfg.resume = checkpoint, False
    hooks = cfg.setdefault('default_hooks', {})
    hooks['checkpoint'] = dict(type='CheckpointHook', by_epoch=False, interval=iters, max_keep_ckpts=1,
                               save_last=True, save_optimizer=False, save_param_scheduler=False)
    build_runner(cfg).train()
    return osp.join(work_dir, f'iter_{iters}.pth')


def evaluate(config_path, checkpoint, work_dir, cfg_options=None, split='test'):
    """Metrics of ``checkpoint`` on the config's ``split`` set ('val' or 'test') through the Runner."""
    cfg = Config.fromfile(config_path)
    if cfg_options:
        cfg.merge_from_dict(copy.deepcopy(cfg_options))
    prepare_runner_cfg(cfg, config_path, work_dir)
    if split == 'val':
        cfg.test_dataloader, cfg.test_evaluator = cfg.val_dataloader, cfg.val_evaluator
    cfg.load_from, cfg.resume = checkpoint, False
    return dict(build_runner(cfg).test())


__all__ = ['finetune', 'evaluate']
