"""Helpers for the tool tests: run tools/*.py in a subprocess or in-process, small overrides of real configs."""
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SEG_CONFIG = 'configs/segmentation/sparse_segmentor_synthetic.py'
# Real config, tiny workload: 4 cached frames, batch 1, validation only when asked.
SMALL = ['train_dataloader.dataset.num_frames=4', 'train_dataloader.batch_size=1', 'train_cfg.val_interval=1000',
         'val_dataloader.dataset.num_frames=2', 'test_dataloader.dataset.num_frames=2',
         'default_hooks.logger.interval=1']


def run_tool(args, timeout=300, launcher=None):
    """Run ``python tools/...`` (or a launcher such as torchrun) from the repo root; returns CompletedProcess."""
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONWARNINGS='ignore')
    cmd = (launcher or [sys.executable]) + [str(a) for a in args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def load_tool(name):
    """Import ``tools/<name>.py`` as a module (its ``main(argv)`` runs in this process)."""
    spec = importlib.util.spec_from_file_location(f'fsdlite_tool_{name}', REPO / 'tools' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_benchmark(monkeypatch):
    """``load_benchmark(name)`` imports ``benchmarks/<name>.py`` as when run as a script (its folder first on the
    path, for ``_harness`` and ``_stages``)."""
    monkeypatch.syspath_prepend(str(REPO / 'benchmarks'))

    def load(name):
        spec = importlib.util.spec_from_file_location(name, REPO / 'benchmarks' / f'{name}.py')
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load


@pytest.fixture(scope='session')
def tools():
    """Namespace: ``run`` (subprocess), ``load`` (in-process module), the config path and small overrides."""
    return types.SimpleNamespace(run=run_tool, load=load_tool, seg_config=SEG_CONFIG, small=list(SMALL), repo=REPO)


@pytest.fixture(scope='session')
def trained_work_dir(tmp_path_factory, tools):
    """Work dir after ``tools/train.py SEG_CONFIG --cfg-options train_cfg.max_iters=4`` (subprocess), and its log.

    Trained once per test session, also under pytest-xdist (workers share the run through a file lock).
    """
    from filelock import FileLock
    shared = tmp_path_factory.getbasetemp().parent
    work, log = shared / 'train4', shared / 'train4.log'
    with FileLock(str(shared / 'train4.lock')):
        if not log.is_file():
            proc = tools.run(['tools/train.py', SEG_CONFIG, '--work-dir', work, '--cfg-options',
                              'train_cfg.max_iters=4', *SMALL])
            assert proc.returncode == 0, proc.stderr[-3000:]
            log.write_text(proc.stdout + proc.stderr)
    return work, log.read_text()
