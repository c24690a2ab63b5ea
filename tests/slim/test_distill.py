"""Distillation from the original during a slim fine-tune (fsdlite.slim.distill): the losses join the training
step with gradients into the student only, the teacher runs just up to the distilled submodule, matching outputs
give a zero gradient, and bad requests fail clearly."""
import types

import pytest
import torch

from fsdlite.slim.api import write_slim
from fsdlite.slim.distill import SlimDistillHook
from fsdlite.slim.errors import SlimError


@pytest.fixture(scope='module')
def teacher_files(prepared, families, tmp_path_factory):
    """(config, checkpoint, options) of the tiny FSD-lite original."""
    path, opts = families['fsd']
    ckpt = tmp_path_factory.mktemp('teacher') / 'original.pth'
    torch.save({'state_dict': prepared('fsd').model.state_dict()}, ckpt)
    return path, str(ckpt), opts


def _student(prepared, slim_kit, tmp_path, width):
    from mmengine.runner import load_checkpoint

    from fsdlite.engine.tool_setup import load_config
    from fsdlite.registry import MODELS
    written = write_slim(prepared('fsd'), slim_kit.Request(width=width), tmp_path)
    model = MODELS.build(load_config(written.config_path, None, allow_new_keys=True).model)
    load_checkpoint(model, written.checkpoint_path, map_location='cpu', strict=True, logger='silent')
    return model.train()


def _hook(teacher_files, **kw):
    config, ckpt, opts = teacher_files
    return SlimDistillHook(config, ckpt, kw.pop('module', 'seg_head'), teacher_options=opts, **kw)


def test_losses_join_training_and_the_teacher_stops_at_the_module(prepared, slim_kit, teacher_files, tmp_path):
    student = _student(prepared, slim_kit, tmp_path, 0.5)
    hook = _hook(teacher_files, weight=2.0)
    hook.before_train(types.SimpleNamespace(model=student))
    after_module = []
    hook.teacher.sir.register_forward_hook(lambda *a: after_module.append(1))
    data = prepared('fsd').data
    losses = student(**data, mode='loss')
    assert {'loss_distill_seg', 'loss_distill_vote', 'loss_seg', 'loss_vote'} <= set(losses)
    assert all(torch.isfinite(losses[k]) and losses[k] > 0 for k in ('loss_distill_seg', 'loss_distill_vote'))
    assert after_module == [] and hook.counts['distilled'] == 1   # the teacher forward was cut at seg_head
    (losses['loss_distill_seg'] + losses['loss_distill_vote']).backward()
    assert student.seg_head.cls_layer.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in hook.teacher.parameters())
    # weight scales every term
    again = student(**data, mode='loss')
    torch.testing.assert_close(again['loss_distill_seg'], losses['loss_distill_seg'])
    hook.weight = 1.0
    torch.testing.assert_close(student(**data, mode='loss')['loss_distill_seg'], losses['loss_distill_seg'] / 2)
    # predict passes are not distilled; after training the hooks are gone
    student.eval()
    with torch.no_grad():
        student(**data, mode='predict')
    assert hook.counts['distilled'] == 3
    hook.after_train(None)
    assert 'loss_distill_seg' not in student.train()(**data, mode='loss')


def test_a_student_equal_to_its_teacher_gets_no_gradient(prepared, slim_kit, teacher_files, tmp_path):
    student = _student(prepared, slim_kit, tmp_path, 1.0).eval()   # eval: batch norms as in the teacher
    hook = _hook(teacher_files)
    hook.before_train(types.SimpleNamespace(model=student))
    hook._start_pass(student, (), dict(mode='loss'))
    outputs = student.seg_head(student.extract_feat(prepared('fsd').data['inputs']))
    teacher = hook._teacher_output(prepared('fsd').data['inputs'])
    losses = student.seg_head.distill_loss(outputs, teacher)
    assert losses['vote'].item() == pytest.approx(0.0, abs=1e-6)
    grads = torch.autograd.grad(losses['seg'] + losses['vote'], [outputs['seg_logits']], retain_graph=True)
    assert grads[0].abs().max().item() < 1e-6
    # and a different teacher output gives a gradient that points the student towards it
    shifted = dict(teacher, seg_logits=teacher['seg_logits'] + 1.0)
    grad = torch.autograd.grad(student.seg_head.distill_loss(outputs, shifted)['seg'], [outputs['seg_logits']])[0]
    assert (grad < 0).all()


def test_head_rejects_mismatched_outputs(prepared):
    head = prepared('fsd').model.seg_head
    out = dict(seg_logits=torch.zeros(5, 3), vote_codes=torch.zeros(5, 3, 3))
    with pytest.raises(ValueError, match=r"seg_logits \(5, 3\) and the teacher's \(4, 3\) differ"):
        head.distill_loss(out, dict(seg_logits=torch.zeros(4, 3), vote_codes=torch.zeros(4, 3, 3)))


@pytest.mark.parametrize('kw, error, message', [
    (dict(weight=0), ValueError, 'weight must be a finite number > 0, got 0'),
    (dict(weight=float('nan')), ValueError, 'weight must be a finite number > 0, got nan'),
    (dict(module=''), ValueError, 'module must be a submodule name'),
])
def test_bad_hook_arguments(kw, error, message, teacher_files):
    with pytest.raises(error, match=message):
        _hook(teacher_files, **kw)


@pytest.mark.parametrize('module, message', [
    ('seg_hed', r"has no submodule module='seg_hed' \(its children: .*seg_head"),
    ('backbone', r'defines no distill_loss'),
])
def test_bad_modules(module, message, prepared, slim_kit, teacher_files, tmp_path):
    student = _student(prepared, slim_kit, tmp_path, 0.5)
    with pytest.raises(SlimError, match=message):
        _hook(teacher_files, module=module).before_train(types.SimpleNamespace(model=student))


def test_finetune_rejects_an_incomplete_distill_request(teacher_files, tmp_path):
    from fsdlite.slim.finetune import finetune
    config, ckpt, _ = teacher_files
    with pytest.raises(ValueError, match=r'distill expects dict\(teacher_config=.*got \{.teacher_config'):
        finetune(config, ckpt, 2, str(tmp_path), distill=dict(teacher_config=config))
