"""Shared benchmark helpers: timing, peak memory in a fresh subprocess, tables.

Every benchmark script compares variants side by side in one run and ends with one
machine-readable line (``RESULT {json}``).  Peak memory of a variant is measured by
running it alone in a fresh Python process (:func:`run_isolated`), reporting the
growth of peak RSS over the process's RSS just before the measured call.
"""
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path



def current_rss_bytes():
    """Resident set size of this process now (Linux)."""
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


def peak_rss_bytes():
    """Peak resident set size of this process so far (Linux reports KiB)."""
    try:  # VmHWM belongs to this process image; ru_maxrss also counts the parent's peak before exec
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss():
    """Reset this process's peak-RSS mark to its current RSS (Linux >= 4.0; no-op elsewhere).

    Lets the measured call's peak exclude transient peaks of the imports and set-up before it.
    """
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
    except OSError:
        pass


def time_call(fn, repeat=3, warmup=1):
    """Median wall time (s) of ``fn()`` over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_isolated(script, function, kwargs=None, timeout=1800, threads=None, warmup=False):
    """Run ``script:function(**kwargs)`` in a fresh interpreter and measure its peak memory.

    ``function`` returns a callable (the measured work, built outside the measurement);
    the child calls it once after recording RSS, then reports seconds and peak RSS growth.
    With ``warmup=True`` it is called once before (its peak then also counts: the
    process-wide peak cannot be reset), so leave it off when the first call is representative.

    Args:
        script (str | Path): benchmark file defining ``function``.
        function (str): name of a function ``(**kwargs) -> callable``.
        kwargs (dict): JSON-serialisable arguments.
        threads (int): torch intra-op threads in the child (default: torch's default).
    Returns:
        dict: ``seconds``, ``peak_bytes`` (growth over the pre-call RSS), ``ok``, ``error``.
    """
    result, tail = _fresh_interpreter(dict(mode='measure', script=str(script), function=function,
                                           kwargs=kwargs or {}, threads=threads, warmup=warmup), timeout)
    if result is None:
        return {'ok': False, 'error': tail, 'seconds': float('nan'), 'peak_bytes': float('nan')}
    return result


def call_isolated(script, function, kwargs=None, timeout=1800, threads=None):
    """Return ``script:function(**kwargs)`` (JSON-serialisable) computed in a fresh interpreter: timings free of
    what the calling process did before (its allocator state after training, loaded modules, caches).

    Args:
        script (str | Path): file defining ``function``.
        function (str): its name.
        kwargs (dict): JSON-serialisable arguments.
        timeout (float): seconds.
        threads (int): torch intra-op threads in the child (default: torch's default).
    Raises:
        RuntimeError: the child failed (its output's tail in the message).
    """
    result, tail = _fresh_interpreter(dict(mode='call', script=str(script), function=function, kwargs=kwargs or {},
                                           threads=threads), timeout)
    if result is None:
        raise RuntimeError(f'{script}:{function} failed in a fresh process: {tail}')
    return result


def _fresh_interpreter(spec, timeout):
    """Run this file as a script on ``spec`` (:func:`_child`) in a new interpreter, so that ``benchmarks/`` is the
    child's first import folder, as for every benchmark script: ``(result, '')`` or ``(None, 'exit N: <output
    tail>')``."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), json.dumps(spec)], capture_output=True,
                          text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith('ISOLATED '):
            return json.loads(line[len('ISOLATED '):]), ''
    return None, f'exit {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}'


def _child(spec):
    """The child's work: ``mode='call'`` returns ``function(**kwargs)``; ``'measure'`` builds the work with it and
    returns seconds and peak memory of one call (see :func:`run_isolated`)."""
    import torch
    if spec.get('threads'):
        torch.set_num_threads(spec['threads'])
    module_spec = importlib.util.spec_from_file_location('bench_module', spec['script'])
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if spec['mode'] == 'call':
        return getattr(module, spec['function'])(**spec['kwargs'])
    work = getattr(module, spec['function'])(**spec['kwargs'])
    if spec.get('warmup'):
        work()
    import gc
    gc.collect()
    reset_peak_rss()
    before = current_rss_bytes()
    peak_before = peak_rss_bytes()
    start = time.perf_counter()
    try:
        work()
    except Exception as exc:  # reported, not raised: the table shows the failure
        return {'ok': False, 'error': f'{type(exc).__name__}: {exc}', 'seconds': float('nan'),
                'peak_bytes': float('nan')}
    seconds = time.perf_counter() - start
    peak = max(peak_rss_bytes(), peak_before) - before
    return {'ok': True, 'error': '', 'seconds': seconds, 'peak_bytes': max(peak, 0)}


def fmt_bytes(n):
    """Human-readable bytes (MiB/GiB)."""
    if n != n:  # NaN
        return 'n/a'
    return f'{n / 2**30:.2f} GiB' if n >= 2**30 else f'{n / 2**20:.1f} MiB'


def parse_checkpoints(items):
    """``--checkpoint`` items ``fsd=PATH`` / ``fsdv2=PATH`` -> dict detector -> path; SystemExit on a bad item
    or a missing file."""
    out = {}
    for item in items or []:
        key, sep, path = item.partition('=')
        if not sep or key not in ('fsd', 'fsdv2') or not Path(path).is_file():
            raise SystemExit(f'--checkpoint expects fsd=PATH or fsdv2=PATH with an existing file, got {item!r}')
        out[key] = path
    return out


def print_table(headers, rows):
    """Print rows (lists of cells) under headers as an aligned text table."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for j, row in enumerate(cells):
        print('  '.join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if j == 0:
            print('  '.join('-' * w for w in widths))


def print_result(payload):
    """The final machine-readable line of a benchmark."""
    print('RESULT ' + json.dumps(payload, sort_keys=True))


if __name__ == '__main__':  # the child of run_isolated / call_isolated
    print('ISOLATED ' + json.dumps(_child(json.loads(sys.argv[1]))))
