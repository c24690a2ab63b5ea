"""Shared test setup: one torch thread, hypothesis profiles, the shared data folder, mmengine warnings, CUDA skips."""
import logging
import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings
from mmengine.logging import MMLogger

torch.set_num_threads(1)  # tiny ops are pathological with 2 threads; spconv strided convs too

# Property tests draw the same examples on every run by default, so a CI run cannot fail by the luck of the
# draw; HYPOTHESIS_PROFILE=explore draws new random examples (run it to hunt for new counter-examples).
settings.register_profile('ci', derandomize=True, print_blob=True)
settings.register_profile('explore', derandomize=False, print_blob=True)
settings.load_profile(os.environ.get('HYPOTHESIS_PROFILE', 'ci'))

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir():
    """The real-data fixture folder: $FSDLITE_SHARED_DATA or ../shared/data beside the repo."""
    env = os.environ.get('FSDLITE_SHARED_DATA')
    return Path(env) if env else REPO_ROOT.parent / 'shared' / 'data'


@pytest.fixture(scope='session')
def shared_data():
    """Path of ../shared/data; skips (or fails when FSDLITE_REQUIRE_SHARED_DATA=1) if absent."""
    path = shared_data_dir()
    if not path.is_dir():
        if os.environ.get('FSDLITE_REQUIRE_SHARED_DATA') == '1':
            pytest.fail(f'shared data folder {path} is missing but FSDLITE_REQUIRE_SHARED_DATA=1')
        pytest.skip(f'shared data folder {path} is absent (set FSDLITE_SHARED_DATA)')
    return path


KITTI_CALIB = 'P2: 1 0 0 0 0 1 0 0 0 0 1 0\nR0_rect: 1 0 0 0 1 0 0 0 1\nTr_velo_to_cam: 0 -1 0 0 0 0 -1 0 1 0 0 0\n'
KITTI_LABEL = 'Car 0.00 0 -1.58 587.01 173.33 614.12 200.12 1.65 1.67 3.64 -0.65 1.71 16.70 -1.59\n'


def write_kitti_layout(root, points=b'', label=KITTI_LABEL, calib=KITTI_CALIB, frames=('000000',)):
    """A KITTI training layout (velodyne, label_2, calib) under ``root`` with the given file contents per frame."""
    for sub in ('velodyne', 'label_2', 'calib'):
        (root / 'training' / sub).mkdir(parents=True, exist_ok=True)
    for frame in frames:
        (root / 'training' / 'velodyne' / f'{frame}.bin').write_bytes(points)
        (root / 'training' / 'label_2' / f'{frame}.txt').write_text(label)
        (root / 'training' / 'calib' / f'{frame}.txt').write_text(calib)
    return root


@pytest.fixture
def kitti_layout():
    """:func:`write_kitti_layout` (with ``KITTI_LABEL`` / ``KITTI_CALIB`` as ``.label`` / ``.calib``)."""
    write_kitti_layout.label, write_kitti_layout.calib = KITTI_LABEL, KITTI_CALIB
    return write_kitti_layout


#: Device of the ``gpu`` fixture. ``FSDLITE_TEST_GPU_DEVICE=cpu`` runs the ``cuda`` tests written on that fixture
#: on the CPU where there is no GPU (a dry run of the GPU checks: tools/device_check.sh with FSDLITE_DEVICE=cpu).
GPU_DEVICE_ENV = 'FSDLITE_TEST_GPU_DEVICE'


@pytest.fixture
def gpu():
    """The device the ``cuda`` tests run on: ``cuda``, or ``$FSDLITE_TEST_GPU_DEVICE`` (a dry run on the CPU)."""
    return torch.device(os.environ.get(GPU_DEVICE_ENV, 'cuda'))


def _randomize_norms(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0, 0.5, generator=g)
                m.running_var.uniform_(0.3, 3.0, generator=g)
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.normal_(0, 0.3, generator=g)
    return module


@pytest.fixture(scope='session')
def randomize_norms():
    """``randomize_norms(module, seed) -> module``: every BatchNorm in it gets seeded random running statistics and
    affine parameters (in place), so that folding or skipping a norm changes the output."""
    return _randomize_norms


class _Sink(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def mm_warnings():
    """The list of WARNING (and worse) messages mmengine's current logger emits during the test."""
    logger = MMLogger.get_current_instance()
    sink = _Sink()
    logger.addHandler(sink)
    yield sink.messages
    logger.removeHandler(sink)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    dry_run = os.environ.get(GPU_DEVICE_ENV, 'cuda') != 'cuda'
    skip = pytest.mark.skip(reason='needs a CUDA device; none is available')
    for item in items:
        if 'cuda' in item.keywords and not (dry_run and 'gpu' in getattr(item, 'fixturenames', ())):
            item.add_marker(skip)
