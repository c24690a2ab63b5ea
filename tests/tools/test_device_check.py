"""tools/device_check.sh, the prepared check for a lent GPU, as a dry run on the CPU (FSDLITE_DEVICE=cpu): the same
steps with tiny iteration counts (every op family built and smoke-tested, the cuda tests of one family on the CPU
through the gpu fixture, a two-iteration training run, the benchmark's quick KITTI run), then summary.json and
summary.md in $OUT."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools' / 'device_check.sh'


def test_script_is_valid_bash_and_documents_its_call():
    subprocess.run(['bash', '-n', str(SCRIPT)], check=True)
    usage = subprocess.run(['bash', str(SCRIPT), '--help'], capture_output=True, text=True, check=True).stdout
    assert 'bash tools/device_check.sh [OUT_DIR] [--wheels DIR]' in usage and '$OUT' in usage


def test_cpu_dry_run_writes_the_summary(tmp_path):
    out = tmp_path / 'out'
    env = dict(os.environ, OUT=str(out), FSDLITE_DEVICE='cpu', PYTHON=sys.executable, OMP_NUM_THREADS='1',
               DEVICE_CHECK_WORK=str(tmp_path / 'work'), DEVICE_CHECK_FAMILIES='voxelnet',
               DEVICE_CHECK_PYTEST='-m cuda -q -p no:cacheprovider tests/models/voxelnet/test_on_device.py',
               DEVICE_CHECK_BENCH='--quick --detectors fsd --no-memory')
    proc = subprocess.run(['bash', str(SCRIPT), str(tmp_path / 'ignored')], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['passed'] and summary['device'] == 'cpu'
    steps = summary['steps']
    assert list(steps) == ['build', 'smoke', 'pytest', 'train', 'bench']
    assert any('[smoke] ok knn cpu' in line for line in steps['smoke']['report'])
    assert steps['pytest']['counts'] == {'passed': 3}  # the cuda tests ran (on the CPU), none skipped
    run, = steps['train']['runs']
    assert run['family'] == 'voxelnet' and run['logged'] == 2 and run['first_loss'] > 0
    assert {'kitti/fsd/dynamic', 'kitti/fsd/static'} <= set(steps['bench']['result']['variants'])
    assert '# fsdlite device check: PASSED' in (out / 'summary.md').read_text()
    assert sorted(p.name for p in out.iterdir()) == ['bench.log', 'build.log', 'pytest.log', 'summary.json',
                                                     'summary.md', 'train.log']
    assert not (tmp_path / 'ignored').exists()  # $OUT wins over the folder argument
