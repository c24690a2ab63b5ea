"""deploy/export_onnx.py, verify_onnx.py and build_trt.py: end to end in subprocesses, option errors in-process."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from fsdlite.deploy.exporter import as_config, build_model


def run(tiny, script, *args):
    env = dict(os.environ, OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, str(tiny.repo / 'deploy' / script), *map(str, args)], cwd=tiny.repo,
                          env=env, capture_output=True, text=True, timeout=600)


def load_script(tiny, script):
    spec = importlib.util.spec_from_file_location(f'deploy_{script[:-3]}', tiny.repo / 'deploy' / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def voxelnet_checkpoint(tiny, tmp_path_factory):
    """A tiny VoxelNet checkpoint (seed 1 weights, not the seed-0 random ones)."""
    cfg = as_config(tiny.configs['voxelnet'], tiny.options['voxelnet'])
    model = build_model(cfg.model, seed=1)
    path = tmp_path_factory.mktemp('ckpt') / 'voxelnet_tiny.pth'
    torch.save(dict(state_dict=model.state_dict(), meta=dict(seed=1)), path)
    return path


def test_export_verify_and_build_trt_commands(tiny, voxelnet_checkpoint, tmp_path, capsys):
    out = tmp_path / 'vn'
    res = run(tiny, 'export_onnx.py', tiny.configs['voxelnet'], voxelnet_checkpoint, '--out', out, '--batch-size', 2,
              '--cfg-options', *tiny.cli_options('voxelnet'))
    assert res.returncode == 0, res.stderr[-3000:]
    assert '# Deploy export: VoxelNet (voxelnet)' in res.stdout and 'deployable: yes' in res.stdout
    assert sorted(p.name for p in out.iterdir()) == ['config.py', 'deploy.json', 'model.onnx', 'report.md']
    info = json.loads((out / 'deploy.json').read_text())
    assert info['checkpoint'] == str(voxelnet_checkpoint.resolve()) and info['batch_size'] == 2
    assert info['graph']['opset'] >= 18 and not info['graph']['problems']

    res = run(tiny, 'verify_onnx.py', out)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert res.stdout.count('final predictions match the eager PyTorch model: yes') == 2
    assert '2 inputs: 2 verified, 0 exceeded a bound (reported), 0 failed' in res.stdout

    # other weights than the exported ones: every input fails, exit status 1 (in-process, same main())
    assert load_script(tiny, 'verify_onnx.py').main([str(out), '--checkpoint', 'random']) == 1
    printed = capsys.readouterr().out
    assert '0 verified' in printed and '2 failed' in printed and ' NO' in printed

    res = run(tiny, 'build_trt.py', out)
    assert res.returncode == 0, res.stderr
    assert 'no TensorRT engine built:' in res.stdout
    assert not (out / 'model.engine').exists()

    # an unusable deploy folder is a set-up error (2, one line), never the status of a numeric mismatch (1): a
    # corrupt model.onnx used to end in onnxruntime's InvalidProtobuf traceback (status 1), a config.py that does
    # not parse in a SyntaxError traceback
    for name, damage, message in (
            ('model.onnx', b'\x07garbage', "model.onnx' could not be loaded by ONNX Runtime ([ONNXRuntimeError]"),
            ('config.py', b'model = dict(\n', "config.py' is not valid Python: '(' was never closed (line 1)")):
        bad = tmp_path / f'bad_{name}'
        shutil.copytree(out, bad)
        (bad / name).write_bytes(damage)
        assert message in _usage_error(load_script(tiny, 'verify_onnx.py'), [str(bad)], capsys)


def test_export_option_errors(tiny, tmp_path, capsys):
    export = load_script(tiny, 'export_onnx.py')
    with pytest.raises(SystemExit) as exc:
        export.main([tiny.configs['voxelnet'], 'random', '--out', str(tmp_path), '--batch-size', '0'])
    assert exc.value.code == 2 and "argument --batch-size: expected an integer >= 1, got '0'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        export.main([tiny.configs['voxelnet'], str(tmp_path / 'missing.pth'), '--out', str(tmp_path)])
    assert exc.value.code == 2 and 'missing.pth' in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        export.main([tiny.configs['voxelnet'], 'random', '--out', str(tmp_path), '--cfg-options', 'model.nope=1'])
    assert exc.value.code == 2 and 'model.nope' in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        export.main([tiny.configs['voxelnet'], 'random', '--out', str(tmp_path), '--bounds', str(tmp_path / 'b.json')])
    assert exc.value.code == 2 and "bounds file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        export.main([tiny.configs['fsd'], 'random', '--out', str(tmp_path), '--tiers', '0.5', '1.5'])
    assert exc.value.code == 2 and 'tiers: each scale must be a number in (0, 1)' in capsys.readouterr().err


def test_verify_and_build_trt_reject_a_non_deploy_folder(tiny, tmp_path, capsys):
    for script in ('verify_onnx.py', 'build_trt.py'):
        with pytest.raises(SystemExit) as exc:
            load_script(tiny, script).main([str(tmp_path)])
        assert exc.value.code == 2 and 'is not a deploy folder: no deploy.json' in capsys.readouterr().err


def _usage_error(module, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        module.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and 'Traceback' not in err
    return err


def test_export_rejects_bad_values_and_files(tiny, tmp_path, capsys):
    export, config = load_script(tiny, 'export_onnx.py'), tiny.configs['voxelnet']
    (tmp_path / 'file.txt').write_text('x')
    (tmp_path / 'syntax.py').write_text('bounds = dict(\n')
    (tmp_path / 'bad.json').write_text('{"max_points": ')
    foreign = tmp_path / 'foreign.pth'
    torch.save({'state_dict': torch.nn.Linear(2, 3).state_dict()}, foreign)
    out = ['--out', str(tmp_path / 'o')]
    cases = [
        (['random', *out, '--margin', 'nan'], "argument --margin: expected a number >= 1, got 'nan'"),  # was accepted
        (['random', *out, '--opset', '17'], "argument --opset: expected an integer >= 18, got '17'"),
        (['random', '--out', str(tmp_path / 'file.txt')], f"argument --out: '{tmp_path / 'file.txt'}' is an existing"),
        (['random', *out, '--data-root', str(tmp_path / 'none')], f"argument --data-root: '{tmp_path / 'none'}' does"),
        (['random', *out, '--cfg-options', 'foo'], "argument --cfg-options: expected KEY=VALUE items, got 'foo'"),
        (['random', *out, '--bounds', str(tmp_path / 'syntax.py')],
         f"bounds file '{tmp_path / 'syntax.py'}' is not valid Python: '(' was never closed"),
        (['random', *out, '--bounds', str(tmp_path / 'bad.json')],
         f"bounds file '{tmp_path / 'bad.json'}' is not valid JSON"),
        ([str(foreign), *out], f"checkpoint '{foreign}' does not belong to config 'VoxelNet' (missing: ["),
    ]
    for argv, message in cases:
        assert message in _usage_error(export, [config, *argv], capsys), argv
    err = _usage_error(export, [str(tmp_path / 'syntax.py'), 'random', *out], capsys)
    assert f"config file '{tmp_path / 'syntax.py'}' is not valid Python" in err


def test_verify_and_build_trt_reject_bad_values_and_deploy_json(tiny, tmp_path, capsys):
    verify, build = load_script(tiny, 'verify_onnx.py'), load_script(tiny, 'build_trt.py')
    (tmp_path / 'deploy.json').write_text('not json{')
    for module in (verify, build):
        err = _usage_error(module, [str(tmp_path)], capsys)
        assert f"{tmp_path / 'deploy.json'} is not valid JSON" in err
    assert "argument --threads: expected an integer >= 1, got '0'" in _usage_error(verify, [str(tmp_path), '--threads',
                                                                                             '0'], capsys)
    assert "argument --workspace-gib: expected a number > 0, got '0'" in _usage_error(
        build, [str(tmp_path), '--workspace-gib', '0'], capsys)


def test_verify_internal_failure_is_not_a_mismatch(tiny, monkeypatch, capsys):
    """Exit status 3 (with the traceback) for an unexpected failure; 1 stays the status of a numeric mismatch."""
    verify = load_script(tiny, 'verify_onnx.py')

    def broken(*args, **kwargs):
        raise ZeroDivisionError('boom')

    monkeypatch.setattr(verify, 'verify_deploy', broken)
    assert verify.main(['any_folder']) == 3
    err = capsys.readouterr().err
    assert 'ZeroDivisionError: boom' in err and 'internal error while verifying' in err
