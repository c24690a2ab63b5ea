"""tools/slim.py end to end on a tiny KPCNN config: files, report, strict loading, fine-tuning, clear errors."""
import json

import pytest
import torch
from mmengine.config import Config

CONFIG = 'configs/kpconv/kpcnn_kpconv_shapes.py'
OPTIONS = ['val_dataloader.dataset.num_samples=2', 'val_dataloader.batch_size=2',
           'val_dataloader.dataset.num_points=[200,300]', 'model.backbone.channels=[8,16,16,32]',
           'model.backbone.blocks=[1,2,1,2]', 'model.backbone.conv_defaults.kernel_size=5', 'model.head_channels=[16]',
           'train_dataloader.dataset.num_samples=4', 'train_dataloader.batch_size=2',
           'train_dataloader.dataset.num_points=[200,300]']


@pytest.fixture
def checkpoint(tools, tmp_path):
    """A checkpoint of the tiny config (freshly initialised weights stand in for a trained model)."""
    return _fresh_checkpoint(tools, CONFIG, OPTIONS, tmp_path / 'trained.pth')


def _fresh_checkpoint(tools, config, options, path):
    """Save freshly initialised weights of ``config`` with the ``--cfg-options`` strings ``options`` (parsed as the
    CLI parses them) to ``path``."""
    import argparse

    from mmengine.config import DictAction

    from fsdlite.engine.tool_setup import load_config
    from fsdlite.registry import MODELS
    parser = argparse.ArgumentParser()
    parser.add_argument('--options', nargs='+', action=DictAction)
    parsed = parser.parse_args(['--options', *options]).options
    torch.manual_seed(0)
    model = MODELS.build(load_config(str(tools.repo / config), parsed).model)
    torch.save({'state_dict': model.state_dict()}, path)
    return path


def _load_slim(out):
    from fsdlite.registry import MODELS
    model = MODELS.build(Config.fromfile(str(out / 'kpcnn_kpconv_shapes_slim.py')).model)
    return model


def test_cli_writes_config_weights_and_cost_report(tools, checkpoint, tmp_path):
    out = tmp_path / 'slim'
    proc = tools.run(['tools/slim.py', CONFIG, checkpoint, '--width', '0.5', '--depth', 'backbone.blocks.3=1',
                      '--out', out, '--no-memory', '--latency-repeat', '1', '--calibration-items', '3',
                      '--cfg-options', *OPTIONS])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'backbone.channels.3: 32 -> 16 (width)' in proc.stdout and 'backbone.blocks.3: 2 -> 1 (depth)' in proc.stdout
    assert 'on 3 train items' in proc.stdout and 'compensated backbone.' in proc.stdout
    report = json.loads((out / 'kpcnn_kpconv_shapes_slim_report.json').read_text())
    assert report['compensation'] and all(len(c) == 4 for c in report['compensation'])
    orig, slim = report['cost']['original'], report['cost']['slim']
    assert orig['params'] > 2 * slim['params'] and orig['macs'] > 2 * slim['macs'] > 0
    assert orig['macs_by_op']['fsdlite::kpconv'] > 0 and slim['latency_s'] > 0
    assert 'speed-up' in (out / 'kpcnn_kpconv_shapes_slim_report.txt').read_text()
    model = _load_slim(out)
    state = torch.load(out / 'kpcnn_kpconv_shapes_slim.pth', weights_only=False)['state_dict']
    model.load_state_dict(state, strict=True)
    assert "_base_ = ['" in (out / 'kpcnn_kpconv_shapes_slim.py').read_text()
    backbone = Config.fromfile(str(out / 'kpcnn_kpconv_shapes_slim.py')).model.backbone
    assert list(backbone.channels) == [4, 8, 8, 16] and list(backbone.blocks) == [1, 2, 1, 1]


@pytest.mark.slow
def test_cli_finetunes_and_measures_peak_memory(tools, checkpoint, tmp_path):
    out = tmp_path / 'slim'
    proc = tools.run(['tools/slim.py', CONFIG, checkpoint, '--width', '0.5', '--finetune', '2', '--finetune-lr',
                      '0.0123', '--out', out, '--latency-repeat', '1', '--cfg-options', *OPTIONS])
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / 'kpcnn_kpconv_shapes_slim_report.json').read_text())
    assert report['cost']['original']['peak_bytes'] > 0 and report['cost']['slim']['peak_bytes'] > 0
    tuned = torch.load(report['finetuned_checkpoint'], weights_only=False)
    assert tuned['meta']['iter'] == 2
    # the fine-tune ran with the requested peak learning rate (the Runner dumps the config it trained with)
    assert Config.fromfile(str(out / 'finetune' / 'kpcnn_kpconv_shapes_slim.py')).optim_wrapper.optimizer.lr == 0.0123
    _load_slim(out).load_state_dict(tuned['state_dict'], strict=True)


@pytest.mark.parametrize('args, message', [
    (['--width', '0'], r'--width=0.0: expected a ratio of kept channels in (0, 1]'),
    (['--depth', 'backbone.blocks.3'], 'expects STAGE=VALUE'),
    (['--keep-ratio-per-stage', 'backbone=half'], "backbone: 'half' is not a valid float"),
    (['--finetune-lr', '0'], "argument --finetune-lr: expected a number > 0, got '0'"),
])
def test_cli_rejects_bad_requests(args, message, tools, checkpoint, tmp_path, capsys):
    main = tools.load('slim').main
    with pytest.raises(SystemExit) as exc:
        main([CONFIG, str(checkpoint), '--out', str(tmp_path), *args, '--cfg-options', *OPTIONS])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_rejects_a_checkpoint_of_another_config(tools, checkpoint, tmp_path, capsys):
    main = tools.load('slim').main
    with pytest.raises(SystemExit) as exc:
        main([str(tools.repo / CONFIG), str(checkpoint), '--out', str(tmp_path), '--cfg-options',
              *[o for o in OPTIONS if 'channels' not in o]])
    assert exc.value.code == 2
    assert 'does not belong to config' in capsys.readouterr().err


FSD_CONFIG = 'configs/fsd/fsdlite_synthetic.py'
FSD_OPTIONS = ['model.backbone.base_channels=8', 'model.backbone.encoder_channels=[[8],[16,16],[16]]',
               'model.backbone.decoder_channels=[[16,16,16],[16,16,8],[8,8,8]]',
               'model.voxel_encoder.feat_channels=[8,8]',
               'model.seg_head.hidden_channels=[16]', 'model.sir.block_channels=[[16,16],[16,16],[16,16]]',
               'model.sir.rel_channels=[8]', 'model.bbox_head.shared_channels=[32]',
               'val_dataloader.dataset.num_frames=2', 'train_dataloader.dataset.num_frames=2',
               'train_dataloader.batch_size=1', 'val_dataloader.dataset.lidar.num_beams=16',
               'train_dataloader.dataset.lidar.num_beams=16']


@pytest.mark.slow
def test_cli_finetunes_with_distillation_from_the_original(tools, tmp_path):
    from fsdlite.registry import MODELS
    original = _fresh_checkpoint(tools, FSD_CONFIG, FSD_OPTIONS, tmp_path / 'original.pth')
    out = tmp_path / 'slim'
    proc = tools.run(['tools/slim.py', FSD_CONFIG, original, '--width', '0.5', '--finetune', '3',
                      '--finetune-distill', 'seg_head', '--distill-weight', '0.5', '--out', out, '--no-memory',
                      '--latency-repeat', '1', '--cfg-options', *FSD_OPTIONS])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'SlimDistillHook (seg_head): distilled 3 training batches; skipped 0' in proc.stdout + proc.stderr
    log = next((out / 'finetune').glob('*/*.log')).read_text()
    assert 'loss_distill_seg' in log and 'loss_distill_vote' in log
    tuned = torch.load(out / 'fsdlite_synthetic_slim_finetuned.pth', weights_only=False)['state_dict']
    assert not any(k.startswith('teacher') for k in tuned)   # the checkpoint holds the student only
    slim = MODELS.build(Config.fromfile(str(out / 'fsdlite_synthetic_slim.py')).model)
    slim.load_state_dict(tuned, strict=True)


@pytest.mark.parametrize('args, message', [
    (['--finetune-distill', 'head'], '--finetune-distill head: needs --finetune ITERS and a trained checkpoint'),
    (['--finetune', '2', '--finetune-distill', 'head'], "Sequential (module='head') defines no distill_loss"),
    (['--finetune', '2', '--finetune-distill', 'seg_head'], "has no submodule module='seg_head'"),
    (['--finetune', '2', '--finetune-distill', 'head', '--distill-weight', '-1'],
     "argument --distill-weight: expected a number > 0, got '-1'"),
])
def test_cli_rejects_bad_distillation_requests(args, message, tools, checkpoint, tmp_path, capsys):
    main = tools.load('slim').main
    with pytest.raises(SystemExit) as exc:
        main([CONFIG, str(checkpoint), '--out', str(tmp_path), '--no-memory', *args, '--cfg-options', *OPTIONS])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
