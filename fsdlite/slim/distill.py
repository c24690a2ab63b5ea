"""Distillation from the original model while a slim model is fine-tuned.

The slim model (student) keeps the original's structure with fewer channels, so a submodule of the original
(teacher) has a twin of the same name and the same output layout. During every training forward
(``mode='loss'``) :class:`SlimDistillHook` runs the teacher on the same preprocessed inputs, in eval mode and
without gradients, only up to that submodule (its forward is cut there), and adds the submodule's own
``distill_loss(student_outputs, teacher_outputs)`` (a dict of scalar losses, e.g.
:meth:`fsdlite.models.lidar.PointSegHead.distill_loss`) to the task losses as ``loss_distill_<name>``.

Everything goes through PyTorch forward hooks (no method is replaced); the saved checkpoints hold the student
only. Batches the teacher or the student produced no output for (no voxel) are counted and reported.
"""
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from ..engine.checkpoint import load_weights
from ..engine.tool_setup import load_config
from ..registry import HOOKS, MODELS
from .errors import SlimError, is_finite_positive


class _TeacherOutput(Exception):
    """Carries the teacher submodule's output out of the (cut) teacher forward."""

    def __init__(self, output):
        super().__init__('teacher output captured')
        self.output = output


def _submodule(model, name, role):
    try:
        return model.get_submodule(name)
    except AttributeError:
        children = ', '.join(n for n, _ in model.named_children())
        raise SlimError(f'SlimDistillHook: the {role} {type(model).__name__} has no submodule module={name!r} '
                        f'(its children: {children})') from None


def distill_module(model, name):
    """The submodule ``name`` of the student ``model``; a :class:`SlimError` when it is missing or defines no
    ``distill_loss``."""
    module = _submodule(model, name, 'student')
    if not callable(getattr(module, 'distill_loss', None)):
        raise SlimError(f'SlimDistillHook: {type(module).__name__} (module={name!r}) defines no '
                        'distill_loss(student_outputs, teacher_outputs)')
    return module


def build_teacher(config, checkpoint, options=None, device=None):
    """The model of ``config`` (with ``--cfg-options``-style ``options``) with the ``checkpoint`` weights (strict;
    a checkpoint of another config names what differs), in eval mode, without gradients."""
    teacher = MODELS.build(load_config(config, options, allow_new_keys=True).model)
    load_weights(teacher, checkpoint, config, 'teacher checkpoint')
    teacher.requires_grad_(False)
    return teacher.to(device).eval() if device is not None else teacher.eval()


@HOOKS.register_module()
class SlimDistillHook(Hook):
    """Adds ``weight * distill_loss(student, teacher)`` of submodule ``module`` to every training step's losses.

    Args:
        teacher_config (str): config file of the original (teacher) model.
        teacher_checkpoint (str): its trained weights (loaded strictly).
        teacher_options (dict | None): ``--cfg-options``-style overrides of the teacher config.
        module (str): dotted name of the submodule distilled in both models, e.g. ``'seg_head'``; the student's
            must define ``distill_loss(student_outputs, teacher_outputs) -> dict[str, Tensor]``.
        weight (float): finite factor > 0 on every distillation loss.
    """

    priority = 'NORMAL'

    def __init__(self, teacher_config, teacher_checkpoint, module, weight=1.0, teacher_options=None):
        if not is_finite_positive(weight):
            raise ValueError(f'SlimDistillHook: weight must be a finite number > 0, got {weight!r}')
        if not isinstance(module, str) or not module:
            raise ValueError(f'SlimDistillHook: module must be a submodule name such as "seg_head", got {module!r}')
        self.teacher_config, self.teacher_checkpoint = teacher_config, teacher_checkpoint
        self.teacher_options = dict(teacher_options) if teacher_options else None
        self.module, self.weight = module, float(weight)
        self.teacher = None
        self.counts = dict(distilled=0, no_student_output=0, no_teacher_output=0)
        self._handles, self._capturing, self._student_output = [], False, None

    def before_train(self, runner):
        """Build the teacher next to the (unwrapped) model and install the forward hooks."""
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        student_module = distill_module(model, self.module)
        device = next(model.parameters()).device
        self.teacher = build_teacher(self.teacher_config, self.teacher_checkpoint, self.teacher_options, device)
        teacher_module = _submodule(self.teacher, self.module, 'teacher')
        self._distill_loss = student_module.distill_loss
        self._handles = [
            model.register_forward_pre_hook(self._start_pass, with_kwargs=True),
            model.register_forward_hook(self._add_losses, with_kwargs=True),
            student_module.register_forward_hook(self._capture_student),
            teacher_module.register_forward_hook(self._cut_teacher),
        ]

    def after_train(self, runner):
        """Remove the hooks and report how many training batches were distilled."""
        for handle in self._handles:
            handle.remove()
        self._handles, self.teacher = [], None
        print_log(f'SlimDistillHook ({self.module}): distilled {self.counts["distilled"]} training batches; '
                  f'skipped {self.counts["no_student_output"]} without a student output and '
                  f'{self.counts["no_teacher_output"]} without a teacher output', logger='current')

    # forward hooks -------------------------------------------------------------------------------------------
    def _start_pass(self, model, args, kwargs):
        self._capturing = kwargs.get('mode') == 'loss'
        self._student_output = None

    def _capture_student(self, module, args, output):
        if self._capturing and self._student_output is None:
            self._student_output = output

    @staticmethod
    def _cut_teacher(module, args, output):
        raise _TeacherOutput(output)

    def _teacher_output(self, inputs):
        try:
            with torch.no_grad():
                self.teacher(inputs, None, mode='tensor')
        except _TeacherOutput as captured:
            return captured.output
        return None

    def _add_losses(self, model, args, kwargs, output):
        if not self._capturing:
            return output
        self._capturing = False
        student, self._student_output = self._student_output, None
        if student is None:
            self.counts['no_student_output'] += 1
            return output
        inputs = kwargs['inputs'] if 'inputs' in kwargs else args[0]
        teacher = self._teacher_output(inputs)
        if teacher is None:
            self.counts['no_teacher_output'] += 1
            return output
        self.counts['distilled'] += 1
        for name, value in self._distill_loss(student, teacher).items():
            output[f'loss_distill_{name}'] = self.weight * value
        return output


def distill_hook_cfg(teacher_config, teacher_checkpoint, module, weight=1.0, teacher_options=None):
    """The ``custom_hooks`` entry of a :class:`SlimDistillHook` (validated by building it)."""
    cfg = dict(type='SlimDistillHook', teacher_config=str(teacher_config), teacher_checkpoint=str(teacher_checkpoint),
               module=module, weight=weight, teacher_options=teacher_options)
    SlimDistillHook(**{k: v for k, v in cfg.items() if k != 'type'})
    return cfg


__all__ = ['SlimDistillHook', 'build_teacher', 'distill_hook_cfg', 'distill_module']
