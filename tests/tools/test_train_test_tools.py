"""tools/train.py and tools/test.py: training, checkpoints, resume, evaluation and every bad-input path."""
import re

import pytest
import torch


@pytest.mark.slow
def test_train_writes_checkpoint(trained_work_dir):
    work, log = trained_work_dir
    assert (work / 'iter_4.pth').is_file()
    assert (work / 'last_checkpoint').read_text().strip().endswith('iter_4.pth')
    ckpt = torch.load(work / 'iter_4.pth', map_location='cpu', weights_only=False)
    assert ckpt['meta']['iter'] == 4 and any(k.startswith('backbone.') for k in ckpt['state_dict'])
    assert 'Iter(train) [4/4]' in log


@pytest.mark.slow
def test_resume_continues_iterations(trained_work_dir, tools, tmp_path):
    work, _ = trained_work_dir
    resumed = tmp_path / 'resumed'
    proc = tools.run(['tools/train.py', tools.seg_config, '--work-dir', resumed, '--resume', work / 'iter_4.pth',
                      '--cfg-options', 'train_cfg.max_iters=6', *tools.small])
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert re.search(r'resumed (epoch|iter)', log, re.IGNORECASE) or 'Load checkpoint from' in log
    assert 'Iter(train) [5/6]' in log and 'Iter(train) [1/6]' not in log
    ckpt = torch.load(resumed / 'iter_6.pth', map_location='cpu', weights_only=False)
    assert ckpt['meta']['iter'] == 6


@pytest.mark.slow
def test_test_tool_evaluates_checkpoint(trained_work_dir, tools, tmp_path, monkeypatch):
    work, _ = trained_work_dir
    test = tools.load('test')
    runners, build = [], test.build_runner
    monkeypatch.setattr(test, 'build_runner', lambda cfg: runners.append(build(cfg)) or runners[-1])
    metrics = test.main([tools.seg_config, str(work / 'iter_4.pth'), '--work-dir', str(tmp_path),
                         '--cfg-options', *tools.small])
    assert {'seg/mIoU', 'seg/IoU_Car', 'seg/fg_IoU', 'seg/acc'} <= set(metrics)
    assert 0 <= metrics['seg/acc'] <= 1
    # the evaluated model holds the checkpoint's weights (not the config's random initialisation)
    saved = torch.load(work / 'iter_4.pth', map_location='cpu', weights_only=False)['state_dict']
    evaluated = test.runner_model(runners[0]).state_dict()
    assert saved.keys() == evaluated.keys()
    assert all(torch.equal(saved[k], evaluated[k]) for k in saved)


def _exit_message(main, argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


def test_misspelt_cfg_option_fails_with_suggestion(tools, tmp_path, capsys):
    train = tools.load('train')
    err = _exit_message(train.main, [tools.seg_config, '--work-dir', str(tmp_path),
                                     '--cfg-options', 'train_cfg.max_iter=4'], capsys)
    assert "'train_cfg.max_iter' is not in the config" in err and 'train_cfg.max_iters' in err
    err = _exit_message(train.main, [tools.seg_config, '--cfg-options', 'model.backbone.encoder_chanels=[[8]]'],
                        capsys)
    assert 'model.backbone.encoder_channels' in err
    assert not (tmp_path / 'iter_4.pth').exists()


def test_new_cfg_key_allowed_on_request(tools):
    cfg = tools.load('train').load_config(str(tools.repo / tools.seg_config), {'model.seg_head.new_option': 1},
                                          allow_new_keys=True)
    assert cfg.model.seg_head.new_option == 1


def test_unknown_config_type_names_close_matches(tools, tmp_path):
    cfg = tmp_path / 'bad_type.py'
    cfg.write_text(f"_base_ = ['{tools.repo / tools.seg_config}']\nmodel = dict(seg_head=dict(type='PointSegHeed'))\n")
    train = tools.load('train')
    with pytest.raises(KeyError, match=r"type='PointSegHeed' is not registered.*Did you mean: 'PointSegHead'"):
        train.main([str(cfg), '--work-dir', str(tmp_path / 'w'), '--cfg-options', *tools.small])


def test_missing_files_and_corrupt_checkpoint(tools, tmp_path, capsys):
    train, test = tools.load('train'), tools.load('test')
    err = _exit_message(train.main, [str(tmp_path / 'nope.py')], capsys)
    assert 'config file' in err and 'does not exist' in err
    err = _exit_message(test.main, [tools.seg_config, str(tmp_path / 'missing.pth')], capsys)
    assert 'checkpoint' in err and 'does not exist' in err
    corrupt = tmp_path / 'corrupt.pth'
    corrupt.write_bytes(b'PK\x03\x04 this is not a checkpoint')
    err = _exit_message(test.main, [tools.seg_config, str(corrupt), '--work-dir', str(tmp_path / 't'),
                                    '--cfg-options', *tools.small], capsys)
    assert 'could not be read' in err and 'corrupt.pth' in err
    err = _exit_message(train.main, [tools.seg_config, '--work-dir', str(tmp_path / 'r'), '--resume', str(corrupt),
                                     '--cfg-options', 'train_cfg.max_iters=1', *tools.small], capsys)
    assert 'could not be read' in err


def test_amp_and_launcher_errors_on_cpu(tools, tmp_path, capsys, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip('checks the CPU-only error paths')
    train = tools.load('train')
    err = _exit_message(train.main, [tools.seg_config, '--work-dir', str(tmp_path), '--amp'], capsys)
    assert '--amp needs a CUDA device' in err
    for key in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'):
        monkeypatch.delenv(key, raising=False)
    err = _exit_message(train.main, [tools.seg_config, '--work-dir', str(tmp_path), '--launcher', 'pytorch'], capsys)
    assert 'torchrun' in err and 'RANK' in err


FSD_STATIC = 'configs/fsd/fsdlite_synthetic_static.py'


def test_test_tool_fixed_shape_matches_the_dynamic_run(tools, tmp_path, capsys, monkeypatch):
    """``--fixed-shape`` evaluates the detector through pre-ops, the fixed-shape forward and NMS
    (FixedShapeDetector): with bounds that hold the frames the evaluator sees the dynamic run's boxes and scores and
    computes the same metrics; a config without bounds is refused with exit status 2."""
    from mmengine.config import Config

    from fsdlite.deploy.fixed_shape import FixedShapeDetector
    from fsdlite.evaluation.metrics.det_metric import DetMetric
    from fsdlite.registry import MODELS
    test = tools.load('test')
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(str(tools.repo / FSD_STATIC)).model)
    checkpoint = tmp_path / 'random.pth'
    torch.save(dict(state_dict=model.state_dict(), meta=dict()), checkpoint)
    options = ['test_dataloader.dataset.num_frames=2', 'model.bbox_head.test_cfg.score_thr=0.0',
               'model.bounds.max_points=40000', 'model.bounds.max_voxels=[16000,16000,8000]',
               'model.bounds.max_pairs=[200000,200000,200000,200000,200000]', 'model.bounds.max_clusters=4096',
               'model.bounds.max_boxes=4096', 'model.bounds.max_cc_iters=64']
    runners, build = [], test.build_runner
    monkeypatch.setattr(test, 'build_runner', lambda cfg: runners.append(build(cfg)) or runners[-1])
    seen, process = [], DetMetric.process
    monkeypatch.setattr(DetMetric, 'process', lambda self, batch, samples: seen.extend(
        s['pred_instances_3d'] for s in samples) or process(self, batch, samples))
    fixed = test.main([FSD_STATIC, str(checkpoint), '--fixed-shape', '--work-dir', str(tmp_path / 'fixed'),
                       '--cfg-options', *options])
    dynamic = test.main([FSD_STATIC, str(checkpoint), '--work-dir', str(tmp_path / 'dyn'), '--cfg-options', *options])
    assert isinstance(runners[0].model, FixedShapeDetector) and not isinstance(runners[1].model, FixedShapeDetector)
    assert len(seen) == 4 and sum(p['bboxes_3d'].shape[0] for p in seen) > 0
    for a, b in zip(seen[:2], seen[2:]):  # frame by frame: fixed-shape run, dynamic run
        torch.testing.assert_close(a['bboxes_3d'], b['bboxes_3d'], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(a['scores_3d'], b['scores_3d'], rtol=1e-4, atol=1e-5)
    assert fixed.keys() == dynamic.keys()  # a class absent from the frames scores NaN in both runs
    assert all(fixed[k] == pytest.approx(dynamic[k], abs=1e-6, nan_ok=True) for k in fixed)
    assert any(v == v for v in fixed.values())  # some classes are scored (NaN != NaN)
    err = _exit_message(test.main, [tools.seg_config, str(checkpoint), '--fixed-shape', '--work-dir',
                                    str(tmp_path / 'seg'), '--cfg-options', *tools.small], capsys)
    assert '--fixed-shape needs a detector config with bounds' in err and 'SparseSegmentor' in err
