"""The steps of tools/device_check.sh (run it, not this): build, smoke-test, cuda tests, short training runs and the
latency benchmark on a lent GPU, then ``summary.json`` + ``summary.md`` in the output folder.

    python tools/device_check.py OUT_DIR        # FSDLITE_DEVICE=cpu: the same steps on the CPU, tiny (a dry run)

Environment (all optional): ``FSDLITE_DEVICE`` (cuda | cpu), ``DEVICE_CHECK_STEPS`` (subset of
``build smoke pytest train bench``), ``DEVICE_CHECK_FAMILIES`` (subset of :data:`TRAIN_CONFIGS`),
``DEVICE_CHECK_ITERS`` (training iterations, default 30 on cuda, 2 on cpu), ``DEVICE_CHECK_PYTEST`` (pytest
arguments), ``DEVICE_CHECK_BENCH`` (benchmark arguments). Every step has a time limit so that the whole check ends
within 8 minutes on a lent GPU; a failed or timed-out step is recorded and the next one runs.
"""
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from mmengine.config import Config

from fsdlite.ops.build import families as op_families

REPO = Path(__file__).resolve().parents[1]
TRAIN_CONFIGS = {
    'segmentor': 'configs/segmentation/sparse_segmentor_synthetic.py',
    'fsd': 'configs/fsd/fsdlite_synthetic.py',
    'fsdv2': 'configs/fsdv2/fsdv2lite_synthetic.py',
    'voxelnet': 'configs/voxelnet/voxelnet_random_blocks.py',
    'kpcnn': 'configs/kpconv/kpcnn_kpconv_shapes.py',
    'kpfcnn': 'configs/kpconv/kpfcnn_kpconv_scenes.py',
}
SIZE_KEYS = ('num_frames', 'num_volumes', 'num_samples')  # dataset length keys, made small for the short runs
# seconds per step on the GPU machine (build + smoke + max(pytest, train) + bench stays under 8 minutes); the CPU
# dry run allows CPU_SLACK times as much (a 2-core machine compiles and trains slower)
LIMITS = dict(build=110, smoke=80, pytest=170, train=150, bench=100)
CPU_SLACK = 4


def run(cmd, log, limit, env=None):
    """Run ``cmd`` from the repo root, appending its output to ``log``; returns (status, seconds, output)."""
    start = time.time()
    try:
        proc = subprocess.run([str(c) for c in cmd], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=limit)
        out, status = proc.stdout + proc.stderr, 'ok' if proc.returncode == 0 else f'exit {proc.returncode}'
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b'').decode(errors='replace') if isinstance(exc.stdout, bytes) else (exc.stdout or '')
        status = f'timeout after {limit} s'
    with open(log, 'a') as f:
        f.write(f'$ {" ".join(map(str, cmd))}\n{out}\n[{status}]\n\n')
    return status, round(time.time() - start, 1), out


def train_options(config, iters, device):
    """``--cfg-options`` of a short run of ``config``: ``iters`` iterations, no validation or intermediate
    checkpoint, a log line per iteration, small datasets (on the CPU also batch size 2)."""
    cfg = Config.fromfile(str(REPO / config))
    opts = [f'train_cfg.max_iters={iters}', 'train_cfg.val_interval=1000000', 'default_hooks.logger.interval=1',
            'default_hooks.checkpoint.interval=1000000']
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        dataset = cfg.get(loader, {}).get('dataset', {})
        opts += [f'{loader}.dataset.{k}={8 if loader == "train_dataloader" else 2}' for k in SIZE_KEYS if k in dataset]
    if device == 'cpu':  # (2, not 1: heads with BatchNorm over samples need two)
        opts.append('train_dataloader.batch_size=2')
    return opts


def losses_of(work_dir):
    """Mean training loss of the first and of the last five logged iterations of a run (each batch differs, so a
    single pair would be noise), and the number logged (mmengine's ``vis_data/scalars.json``)."""
    values = []
    for path in sorted(Path(work_dir).glob('*/vis_data/scalars.json')):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if 'loss' in record:
                values.append(record['loss'])
    if not values:
        return None, None, 0
    k = max(1, min(5, len(values) // 2))
    return round(sum(values[:k]) / k, 4), round(sum(values[-k:]) / k, 4), len(values)


def train_one(family, iters, device, out_dir, work_root, limit):
    config = TRAIN_CONFIGS[family]
    work_dir = Path(work_root) / family
    cmd = [sys.executable, 'tools/train.py', config, '--work-dir', work_dir, '--cfg-options',
           *train_options(config, iters, device)]
    status, seconds, _ = run(cmd, Path(out_dir) / f'train_{family}.tmp', limit)
    first, last, logged = losses_of(work_dir)
    return dict(family=family, config=config, status=status, seconds=seconds, iters=iters, first_loss=first,
                last_loss=last, logged=logged, loss_fell=None if first is None else last < first)


def main(argv=None):
    """Run the steps and write the summary; returns 0 when every step passed, else 1."""
    args = sys.argv[1:] if argv is None else argv
    out_dir = Path(args[0] if args else os.environ.get('OUT', 'device_check_out'))
    out_dir.mkdir(parents=True, exist_ok=True)
    device = os.environ.get('FSDLITE_DEVICE', 'cuda')
    steps = os.environ.get('DEVICE_CHECK_STEPS', 'build smoke pytest train bench').split()
    families = os.environ.get('DEVICE_CHECK_FAMILIES', ' '.join(TRAIN_CONFIGS)).split()
    iters = int(os.environ.get('DEVICE_CHECK_ITERS', 30 if device == 'cuda' else 2))
    work_root = Path(os.environ.get('DEVICE_CHECK_WORK', '/tmp/fsdlite_device_check'))
    env = dict(os.environ)
    limits = {k: v * (1 if device == 'cuda' else CPU_SLACK) for k, v in LIMITS.items()}
    if device != 'cuda':  # the dry run: cuda tests on the CPU through the gpu fixture
        env['FSDLITE_TEST_GPU_DEVICE'] = device
    summary = dict(device=device, steps={}, started=time.strftime('%Y-%m-%d %H:%M:%S'))
    summary['torch'] = torch.__version__
    summary['gpu'] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    total = time.time()

    if 'build' in steps:  # one process per family, in parallel (each smoke-tests what it compiles)
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            results = list(pool.map(lambda f: (f, run([sys.executable, '-m', 'fsdlite.ops', f],
                                                      out_dir / 'build.log', limits['build'], env)),
                                    op_families()))
        failed = [f for f, (status, _, _) in results if status != 'ok']
        summary['steps']['build'] = dict(status='ok' if not failed else f'failed: {failed}',
                                         seconds=max(r[1] for _, r in results))
    if 'smoke' in steps:
        status, seconds, out = run([sys.executable, '-m', 'fsdlite.ops', '--smoke', '--diagnose'],
                                   out_dir / 'build.log',
                                   limits['smoke'], env)
        summary['steps']['smoke'] = dict(status=status, seconds=seconds,
                                         report=[line for line in out.splitlines()
                                                 if 'smoke' in line.lower() or 'diagnosis' in line][-60:])
    pending = {}
    with ThreadPoolExecutor(max_workers=2) as pool:  # tests and training runs share the GPU
        if 'pytest' in steps:
            default = '-m cuda -q -n 4 -p no:cacheprovider tests' if device == 'cuda' else '-m cuda -q tests'
            pytest_args = os.environ.get('DEVICE_CHECK_PYTEST', default).split()
            pending['pytest'] = pool.submit(run, [sys.executable, '-m', 'pytest', *pytest_args],
                                            out_dir / 'pytest.log', limits['pytest'], env)
        if 'train' in steps:
            def train_all():
                with ThreadPoolExecutor(max_workers=len(families)) as inner:
                    return list(inner.map(lambda f: train_one(f, iters, device, out_dir, work_root,
                                                              limits['train']), families))
            pending['train'] = pool.submit(train_all)
        if 'pytest' in pending:
            status, seconds, out = pending['pytest'].result()
            counts = re.findall(r'(\d+) (passed|failed|skipped|error|errors)', out)
            summary['steps']['pytest'] = dict(status=status, seconds=seconds,
                                              counts={k: int(n) for n, k in counts},
                                              failures=re.findall(r'^(?:FAILED|ERROR) .*$', out, re.M)[:30])
        if 'train' in pending:
            runs = pending['train'].result()
            with open(out_dir / 'train.log', 'w') as log:
                for r in runs:
                    tmp = out_dir / f'train_{r["family"]}.tmp'
                    log.write(tmp.read_text()[-20000:] if tmp.exists() else '')
                    tmp.unlink(missing_ok=True)
            # the dry run's couple of iterations show that training runs, not that it learns
            ok = all(r['status'] == 'ok' and (r['loss_fell'] or device != 'cuda') for r in runs)
            summary['steps']['train'] = dict(status='ok' if ok else 'failed', runs=runs,
                                             seconds=max((r['seconds'] for r in runs), default=0))
    if 'bench' in steps:
        default = '--device cuda --repeat 3' if device == 'cuda' else '--quick --detectors fsd --no-memory'
        bench_args = os.environ.get('DEVICE_CHECK_BENCH', default).split()
        status, seconds, out = run([sys.executable, 'benchmarks/fsd_latency.py', *bench_args], out_dir / 'bench.log',
                                   limits['bench'], env)
        result = [line[len('RESULT '):] for line in out.splitlines() if line.startswith('RESULT ')]
        summary['steps']['bench'] = dict(status=status, seconds=seconds,
                                         result=json.loads(result[-1]) if result else None)
    summary['seconds'] = round(time.time() - total, 1)
    summary['passed'] = all(step['status'] == 'ok' for step in summary['steps'].values())
    (out_dir / 'summary.json').write_text(json.dumps(summary, indent=1, default=str))
    (out_dir / 'summary.md').write_text(markdown(summary))
    print(markdown(summary))
    return 0 if summary['passed'] else 1


def markdown(summary):
    """The summary as a short Markdown report."""
    lines = [f'# fsdlite device check: {"PASSED" if summary["passed"] else "FAILED"}', '',
             f'device {summary["device"]} ({summary["gpu"] or "no GPU"}), torch {summary["torch"]}, '
             f'{summary["seconds"]} s, started {summary["started"]}', '', '| step | status | seconds |', '|---|---|---|']
    lines += [f'| {name} | {step["status"]} | {step["seconds"]} |' for name, step in summary['steps'].items()]
    pytest_step = summary['steps'].get('pytest')
    if pytest_step:
        lines += ['', f'pytest: {pytest_step["counts"]}'] + [f'- {f}' for f in pytest_step['failures']]
    train = summary['steps'].get('train')
    if train:
        lines += ['', '| family | status | iterations | first loss | last loss | fell |', '|---|---|---|---|---|---|']
        lines += [f'| {r["family"]} | {r["status"]} | {r["iters"]} | {r["first_loss"]} | {r["last_loss"]} | '
                  f'{r["loss_fell"]} |' for r in train['runs']]
    bench = summary['steps'].get('bench')
    if bench and bench.get('result'):
        lines += ['', '| variant | total ms | boxes |', '|---|---|---|']
        lines += [f'| {k} | {v.get("total_ms", v.get("error"))} | {v.get("boxes", "")} |'
                  for k, v in bench['result']['variants'].items() if 'total_ms' in v or 'error' in v]
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    sys.exit(main())
