"""A plain (non-editable) install ships the op sources and builds ops from the installed package."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp('wheel')
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', str(REPO), '--no-deps', '--no-build-isolation',
                    '--quiet', '-w', str(out)], check=True, cwd=out)
    wheels = list(out.glob('fsdlite-*.whl'))
    assert len(wheels) == 1
    return wheels[0]


@pytest.mark.slow
def test_wheel_contains_ops_as_fsdlite_ops(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert 'fsdlite/ops/build.py' in names
    assert 'fsdlite/ops/include/fsdlite_ops/common.h' in names
    assert 'fsdlite/ops/segment_reduce/segment_reduce_cpu.cpp' in names
    assert 'fsdlite/ops/segment_reduce/segment_reduce_cuda.cu' in names
    assert 'fsdlite/registry.py' in names
    assert not any(n.startswith(('tests/', 'ops/')) for n in names)


@pytest.mark.slow
def test_installed_package_builds_and_runs_an_op(wheel, tmp_path):
    target = tmp_path / 'site'
    subprocess.run([sys.executable, '-m', 'pip', 'install', '--no-deps', '--quiet', '--target', str(target),
                    str(wheel)], check=True)
    code = ('import torch, fsdlite.ops as ops\n'
            'assert ops.__file__.startswith(%r), ops.__file__\n'
            'v = ops.segment_reduce(torch.tensor([1., 3., 2.]), torch.tensor([0, 1, 0]), 2, "max")\n'
            'print(v.tolist())\n') % str(target)
    env = dict(os.environ, PYTHONPATH=str(target), TORCH_EXTENSIONS_DIR=str(tmp_path / 'ext'))
    proc = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == '[2.0, 3.0]'
