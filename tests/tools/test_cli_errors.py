"""Bad command lines of every tools/*.py script: exit status 2 and one ``error:`` line naming the option, the value
and what was expected (no traceback, no silent success), before any slow work starts."""
import pytest
import torch

SEG = 'configs/segmentation/sparse_segmentor_synthetic.py'
FSD = 'configs/fsd/fsdlite_synthetic.py'
KPCNN = 'configs/kpconv/kpcnn_kpconv_shapes.py'


@pytest.fixture
def paths(tmp_path):
    """A plain file, a folder, a 10-byte corrupt checkpoint, an empty one and a config with a syntax error."""
    (tmp_path / 'file.txt').write_text('x')
    (tmp_path / 'folder').mkdir()
    (tmp_path / 'corrupt.pth').write_bytes(bytes(range(7, 17)))
    (tmp_path / 'empty.pth').write_bytes(b'')
    (tmp_path / 'syntax.py').write_text('model = dict(\n')
    return tmp_path


def _error(tool, argv, capsys):
    """Run ``main(argv)`` of a tool that must fail; returns its ``error:`` line."""
    with pytest.raises(SystemExit) as exc:
        tool.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert 'Traceback' not in err or '--- Logging error ---' in err  # loggers of earlier in-process runners
    lines = [line for line in err.splitlines() if ': error: ' in line]
    assert len(lines) == 1, err
    return lines[0]


USAGE = [  # (tool, argv with {tmp} for the fixture folder, expected message)
    ('train', [SEG, '--cfg-options', 'foo'], "argument --cfg-options: expected KEY=VALUE items, got 'foo'"),
    ('train', [SEG, '--cfg-options', 'model.x=[1,2'], 'argument --cfg-options: could not parse'),
    ('train', [SEG, '--work-dir', '{tmp}/file.txt'], "argument --work-dir: '{tmp}/file.txt' is an existing file"),
    ('test', [SEG, 'x.pth', '--cfg-options', '=1'], "argument --cfg-options: expected KEY=VALUE items, got '=1'"),
    ('collect_bounds', [FSD, '--margin', 'nan'], "argument --margin: expected a number >= 1, got 'nan'"),
    ('collect_bounds', [FSD, '--num-frames', 'two'], "argument --num-frames: expected an integer >= 1, got 'two'"),
    ('collect_bounds', [FSD, '--out', '{tmp}/folder'], "argument --out: '{tmp}/folder' is a folder; expected a file"),
    ('collect_bounds', [FSD, '--out', '{tmp}/no/b.py'], "argument --out: '{tmp}/no/b.py': folder '{tmp}/no' does not"),
    ('demo', ['--max-iters', '0'], "argument --max-iters: expected an integer >= 1, got '0'"),
    ('demo', ['--max-iters', '-5'], "argument --max-iters: expected an integer >= 1, got '-5'"),
    ('demo', ['--threads', '0'], "argument --threads: expected an integer >= 1, got '0'"),
    ('demo', ['--min-box-score', '7'], "argument --min-box-score: expected a number in [0, 1], got '7'"),
    ('demo', ['--kitti-root', '{tmp}/none'], "argument --kitti-root: '{tmp}/none' does not exist; expected an"),
    ('demo', ['--out-dir', '{tmp}/file.txt/sub'], "argument --out-dir: '{tmp}/file.txt/sub' lies under the file"),
    ('slim', [KPCNN, 'none', '--out', '{tmp}', '--latency-repeat', '0'],
     "argument --latency-repeat: expected an integer >= 1, got '0'"),
    ('slim', [KPCNN, 'none', '--out', '{tmp}/file.txt'], "argument --out: '{tmp}/file.txt' is an existing file"),
    ('slim', [KPCNN, 'none', '--out', '{tmp}', '--sample-index', '-1'],
     "argument --sample-index: expected an integer >= 0, got '-1'"),
    ('create_gt_database', [FSD, '--out', '{tmp}/file.txt'], "argument --out: '{tmp}/file.txt' is an existing file"),
    ('create_gt_database', [FSD, '--out', '{tmp}', '--cfg-options', 'foo'],
     "argument --cfg-options: expected KEY=VALUE items, got 'foo'"),
]


@pytest.mark.parametrize('name, argv, message', USAGE, ids=[f'{u[0]}:{" ".join(u[1][-2:])}' for u in USAGE])
def test_bad_option_values_are_usage_errors(name, argv, message, tools, paths, capsys):
    line = _error(tools.load(name), [a.format(tmp=paths) for a in argv], capsys)
    assert message.format(tmp=paths) in line


@pytest.mark.parametrize('name, extra', [('train', []), ('test', ['x.pth']), ('collect_bounds', []),
                                         ('slim', ['none', '--out', '{tmp}/o']),
                                         ('create_gt_database', ['--out', '{tmp}/o'])])
def test_config_with_syntax_error_or_folder(name, extra, tools, paths, capsys):
    tool = tools.load(name)
    extra = [a.format(tmp=paths) for a in extra]
    line = _error(tool, [str(paths / 'syntax.py'), *extra], capsys)
    assert f"config file '{paths / 'syntax.py'}' is not valid Python: '(' was never closed (line 1)" in line
    line = _error(tool, [str(paths / 'folder'), *extra], capsys)
    assert f"config file '{paths / 'folder'}' is a folder; expected a file" in line


def test_demo_config_errors_exit_cleanly(tools, paths, capsys):
    demo = tools.load('demo')
    line = _error(demo, ['--config', str(paths / 'missing.py'), '--out-dir', str(paths / 'd')], capsys)
    assert f"config file '{paths / 'missing.py'}' does not exist" in line
    line = _error(demo, ['--config', SEG, '--out-dir', str(paths / 'd'), '--cfg-options', 'model.nope=1'], capsys)
    assert "--cfg-options key 'model.nope' is not in the config" in line
    assert not (paths / 'd').exists()


def test_train_rejects_a_schedule_without_iterations(tools, paths, capsys):
    line = _error(tools.load('train'), [SEG, '--work-dir', str(paths / 'w'), '--cfg-options', 'train_cfg.max_iters=0'],
                  capsys)
    assert 'train_cfg.max_iters=0: expected an integer >= 1' in line


def test_create_gt_database_checks_config_keys(tools, paths, capsys):
    tool = tools.load('create_gt_database')
    line = _error(tool, [FSD, '--out', str(paths / 'g'), '--cfg-options', 'train_dataloader.dataset.nope=1'], capsys)
    assert "--cfg-options key 'train_dataloader.dataset.nope' is not in the config" in line
    line = _error(tool, [str(paths / 'missing.py'), '--out', str(paths / 'g')], capsys)
    assert f"config file '{paths / 'missing.py'}' does not exist" in line


@pytest.mark.parametrize('ckpt, message', [('corrupt.pth', 'could not be read (UnpicklingError'),
                                           ('empty.pth', 'could not be read (EOFError'),
                                           ('folder', 'is a folder; expected a file')])
def test_slim_rejects_unreadable_checkpoints(ckpt, message, tools, paths, capsys):
    line = _error(tools.load('slim'), [KPCNN, str(paths / ckpt), '--width', '0.5', '--out', str(paths / 'o')], capsys)
    assert f"checkpoint '{paths / ckpt}' {message}" in line


@pytest.fixture
def foreign_checkpoint(tmp_path):
    """A checkpoint of another model (one linear layer), with training state."""
    path = tmp_path / 'foreign.pth'
    torch.save({'meta': {'iter': 1, 'epoch': 0}, 'state_dict': torch.nn.Linear(2, 3).state_dict()}, path)
    return path


FOREIGN = [  # before: test.py evaluated random weights (mmengine loads non-strictly) and exited 0, train --resume
    # failed with ``KeyError: 'meta'``, collect_bounds with a 20-line RuntimeError
    ('test', [KPCNN, '{ckpt}', '--work-dir', '{tmp}/t'], "checkpoint '{ckpt}' does not belong to config"),
    ('train', [KPCNN, '--work-dir', '{tmp}/r', '--resume', '{ckpt}'], "--resume checkpoint '{ckpt}' does not belong"),
    # was: trained from random weights and exited 0 (mmengine's load_from is not strict)
    ('train', [KPCNN, '--work-dir', '{tmp}/l', '--cfg-options', 'load_from={ckpt}'],
     "load_from checkpoint '{ckpt}' does not belong to config"),
    ('collect_bounds', [FSD, '--checkpoint', '{ckpt}'], "checkpoint '{ckpt}' does not belong to config"),
]


@pytest.mark.parametrize('name, argv, message', FOREIGN, ids=[f[0] for f in FOREIGN])
def test_checkpoint_of_another_config_is_rejected(name, argv, message, tools, foreign_checkpoint, capsys):
    fill = dict(ckpt=foreign_checkpoint, tmp=foreign_checkpoint.parent)
    line = _error(tools.load(name), [a.format(**fill) for a in argv], capsys)
    assert message.format(**fill) in line and "unexpected: ['bias', 'weight']" in line


def test_resume_needs_training_state(tools, tmp_path, capsys):
    """Weights without 'meta' used to fail inside mmengine with ``KeyError: 'meta'`` (20-line traceback)."""
    from fsdlite.engine.tool_setup import load_config
    from fsdlite.registry import MODELS
    weights = tmp_path / 'weights_only.pth'
    torch.save({'state_dict': MODELS.build(load_config(str(tools.repo / KPCNN)).model).state_dict()}, weights)
    line = _error(tools.load('train'), [KPCNN, '--work-dir', str(tmp_path / 'r'), '--resume', str(weights)], capsys)
    assert f"--resume checkpoint '{weights}' holds no training state" in line and 'load_from=PATH' in line


VALUES = [  # values that failed deep inside training (TypeError in torch.optim, ZeroDivisionError in the loop,
    # IndexError in the loss of the first batch) or were accepted and ignored
    ([SEG, '--cfg-options', 'optim_wrapper.optimizer.lr=abc'], "optim_wrapper.optimizer.lr='abc': expected a finite "
                                                               'number >= 0'),
    ([SEG, '--cfg-options', 'optim_wrapper.optimizer.betas=[0.9,1.5]'], 'betas=[0.9, 1.5]: expected two numbers in'),
    ([SEG, '--cfg-options', 'model.seg_head.num_classes=0'], 'model.seg_head.num_classes=0: expected an integer >= 1'),
    ([KPCNN, '--cfg-options', 'model.num_classes=0'], 'model.num_classes=0: expected an integer >= 1'),
    ([SEG, '--cfg-options', 'train_cfg.val_interval=0'], 'train_cfg.val_interval=0: expected an integer >= 1'),
    ([SEG, '--cfg-options', 'train_cfg.max_iters=4', 'max_iters=5'],
     '--cfg-options sets train_cfg.max_iters=4 and max_iters=5; expected one of them'),
]


@pytest.mark.parametrize('argv, message', VALUES, ids=[v[1].split(':')[0].split('=')[0] for v in VALUES])
def test_config_values_training_cannot_use(argv, message, tools, paths, capsys):
    line = _error(tools.load('train'), [argv[0], '--work-dir', str(paths / 'w'), *argv[1:]], capsys)
    assert message in line


def test_test_tool_checks_config_values_too(tools, paths, capsys):
    line = _error(tools.load('test'), [KPCNN, str(paths / 'x.pth'), '--cfg-options', 'model.num_classes=0'], capsys)
    assert 'model.num_classes=0: expected an integer >= 1' in line


@pytest.mark.parametrize('content, message', [
    (bytes(range(200, 256)), 'last_checkpoint holds binary data; expected the text file mmengine writes'),
    (b'/nonexistent/iter_3.pth', "last_checkpoint names '/nonexistent/iter_3.pth', which is not a checkpoint file"),
])
def test_resume_with_a_damaged_last_checkpoint(content, message, tools, paths, capsys):
    """A binary last_checkpoint used to end in a UnicodeDecodeError traceback."""
    work = paths / 'w'
    work.mkdir()
    (work / 'last_checkpoint').write_bytes(content)
    line = _error(tools.load('train'), [KPCNN, '--work-dir', str(work), '--resume'], capsys)
    assert message in line and 'delete it to start afresh, or pass --resume CHECKPOINT' in line


def test_partial_load_opts_out_of_the_strict_load_from(tools, foreign_checkpoint, monkeypatch, capsys):
    from mmengine.runner import Runner
    trained = []
    monkeypatch.setattr(Runner, 'train', lambda self: trained.append(self))
    tools.load('train').main([KPCNN, '--work-dir', str(foreign_checkpoint.parent / 'p'), '--partial-load',
                              '--cfg-options', f'load_from={foreign_checkpoint}'])
    assert len(trained) == 1


def test_kitti_data_errors_are_one_line(tools, tmp_path, kitti_layout, capsys):
    """An empty velodyne folder used to hang forever at 100 % CPU; a 0-byte .bin trained with loss 0; a bad label line
    ended in a ValueError traceback."""
    argv = ['configs/fsd/fsdlite_kitti.py', '--work-dir', str(tmp_path / 'w'), '--cfg-options', 'train_cfg.max_iters=1',
            f'train_dataloader.dataset.data_root={tmp_path}', 'train_dataloader.dataset.ann_file=',
            'train_dataloader.dataset.data_prefix.pts=training/velodyne', 'train_dataloader.batch_size=1']
    train = tools.load('train')
    kitti_layout(tmp_path, frames=())
    assert f"KittiDataset has no samples (data_root='{tmp_path}'" in _error(train, argv, capsys)
    kitti_layout(tmp_path, points=b'')
    assert "000000.bin' is empty (0 bytes)" in _error(train, argv, capsys)
    kitti_layout(tmp_path, points=bytes(16), label=kitti_layout.label.replace('1.65', 'x'))
    assert '000000.txt:1: non-numeric label fields' in _error(train, argv, capsys)
