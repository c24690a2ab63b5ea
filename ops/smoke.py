"""Post-build smoke test: an error raised by the op libraries' C++ code must reach Python as an exception.

On one toolchain (a lent GPU machine: torch 2.11+cu130, another compiler and runtime than this library's CI) every
error raised by fsdlite's JIT-built libraries killed the process with SIGSEGV -- on CPU tensors too -- while errors
raised by torch itself were fine. Nothing in the op code was at fault there (no throw inside a parallel region:
every ``TORCH_CHECK`` runs before ``at::parallel_for``, whose OpenMP backend catches and rethrows anyway), so the
check belongs to the build: right after a family is compiled, :func:`smoke_test` makes one known invalid call of a
real op of it (CPU, and CUDA where the library has CUDA kernels) in a **subprocess** and checks that it raised a
Python exception. A crash is reported as :class:`OpsSmokeTestError` with the signal, the op call and the toolchain
(compiler of torch and of the library, and which shared object supplies the C++ unwinder), instead of a SIGSEGV in
a user's training run.

``FSDLITE_OPS_SMOKE`` controls it: ``1`` (default) raises, ``warn`` prints the report and goes on, ``0`` skips.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import torch

SMOKE_ENV = 'FSDLITE_OPS_SMOKE'
EXPECTED = ('RuntimeError', 'ValueError', 'IndexError', 'TypeError')  # what c10's error types become in Python

# One invalid call of a real op per family, through torch.ops (no Python wrapper checks first): a C++ check must
# raise. ``dev`` is the device, ``F`` torch.ops.fsdlite.
CALLS = {
    'connected_components': "F.connected_components(torch.rand(4, 3, device=dev), torch.ones(2, device=dev), None, "
                            "None, 3, False)",
    'grid_subsample': "F.grid_subsample(torch.rand(5, 3, device=dev), [-1.0, 1.0, 1.0])",
    'iou3d': "F.boxes_iou_bev(torch.rand(3, 2, device=dev), torch.rand(3, 7, device=dev), False)",
    'knn': "F.knn(torch.rand(5, 3, device=dev), torch.rand(5, 3, device=dev), 0)",
    'knn_aggregate': "F.knn_aggregate(torch.rand(4, 3, device=dev), torch.full((2, 2), 99, dtype=torch.long, "
                     "device=dev), torch.rand(2, 2, device=dev))",
    'kp_aggregate': "F.kp_aggregate(torch.rand(2, 3, device=dev), torch.rand(4, 3, device=dev), torch.zeros(2, 2, "
                    "dtype=torch.long, device=dev), torch.rand(4, 5, device=dev), torch.rand(3, 3, device=dev), None, "
                    "None, 1.0, 'no-such-influence', 'sum')",
    'kpconv': "F.kpconv(torch.rand(2, 3, device=dev), torch.rand(4, 3, device=dev), torch.zeros(2, 2, "
              "dtype=torch.long, device=dev), torch.rand(4, 5, device=dev), torch.rand(3, 3, device=dev), "
              "torch.rand(3, 5, 6, device=dev), None, 1.0, 'no-such-influence', 'sum')",
    'layer_norm': "F.layer_norm_rows(torch.rand(4, 8, device=dev), torch.rand(3, device=dev), torch.rand(8, "
                  "device=dev), 1e-5)",
    'points_in_boxes': "F.points_in_boxes(torch.rand(5, 3, device=dev), torch.rand(2, 7, device=dev), None, None, "
                       "'no-such-origin')",
    'radius_neighbors': "F.radius_neighbors(torch.rand(5, 3, device=dev), torch.rand(5, 3, device=dev), -1.0, 4)",
    'rulebook': "F.rulebook_inverse(torch.full((3, 2), -1, dtype=torch.long, device=dev), 5)",
    'selftest': "F._raise_error(torch.zeros(1, device=dev), 0)",
    'segment_reduce': "F.segment_reduce(torch.rand(4, 2, device=dev), torch.zeros(4, dtype=torch.long, device=dev), "
                      "1, 'no-such-reduction')",
    'sparse_conv': "F.sparse_conv(torch.rand(4, 3, device=dev), torch.rand(1, 2, 5, device=dev), torch.zeros(2, 1, "
                   "dtype=torch.long, device=dev), torch.tensor([0, 1], device=dev), 4)",
    'voxelize': "F.voxelize(torch.rand(5, 3, device=dev), [-1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0, 1.0, 1.0], None)",
}

# Runs in the subprocess: argv[1] = JSON {'libraries': [[family, path]], 'calls': [[family, code]], 'devices'}.
_CHILD = r'''
import builtins, ctypes, json, sys
import torch
spec = json.loads(sys.argv[1])


class DlInfo(ctypes.Structure):
    _fields_ = [('fname', ctypes.c_char_p), ('fbase', ctypes.c_void_p), ('sname', ctypes.c_char_p),
                ('saddr', ctypes.c_void_p)]


def provider(symbol, library):
    """The shared object supplying ``symbol`` to ``library``: the process's global scope first (objects loaded
    RTLD_GLOBAL), then the library's own dependencies -- the order the dynamic linker binds in."""
    for handle in (None, library):
        try:
            found = ctypes.cast(getattr(ctypes.CDLL(handle), symbol), ctypes.c_void_p)
        except (AttributeError, OSError):
            continue
        info = DlInfo()
        ctypes.CDLL(None).dladdr(found, ctypes.byref(info))
        return (info.fname or b'?').decode() + (' (global scope)' if handle is None else '')
    return 'not found'


for family, path in spec['libraries']:
    torch.ops.load_library(path)
runtime = sorted({line.split()[-1] for line in open('/proc/self/maps') if any(
    name in line for name in ('libstdc++', 'libgcc_s', 'libunwind', 'libc++'))})
print('[smoke] runtime libraries: ' + ', '.join(runtime), flush=True)
if spec['libraries']:
    first = spec['libraries'][0][1]
    print('[smoke] _Unwind_RaiseException from ' + provider('_Unwind_RaiseException', first) + '; __cxa_throw from '
          + provider('__cxa_throw', first), flush=True)
F = torch.ops.fsdlite
for family, code in spec['calls']:
    for dev in spec['devices']:
        print(f'[smoke] try {family} on {dev}: {code}', flush=True)
        try:
            exec(code)
        except tuple(getattr(builtins, name) for name in spec['expected']) as exc:
            print(f'[smoke] ok {family} {dev}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}', flush=True)
        else:
            print(f'[smoke] NO ERROR {family} {dev}: the invalid call returned', flush=True)
            sys.exit(3)
'''


# The self-test modes (ops/selftest/selftest.h): what each checks and the Python outcome it must have.
MODES = {
    0: ('c10::Error (TORCH_CHECK) thrown across the library boundary', 'RuntimeError'),
    1: ('std::runtime_error thrown across the library boundary', 'RuntimeError'),
    2: ('c10::Error thrown and caught inside the library', None),
    3: ('c10::Error thrown inside at::parallel_for (CPU)', 'RuntimeError'),
    4: ('c10::ValueError (TORCH_CHECK_VALUE) thrown across the library boundary', 'ValueError'),
    5: ('std::runtime_error thrown and caught inside the library', None),
}


class OpsSmokeTestError(RuntimeError):
    """An op library crashed (or did not raise) on a known invalid call: see the message for the toolchain.

    ``crashed`` is False when the check itself could not run (the subprocess failed before any call, or timed out):
    then nothing is known about the library, and a build only warns.
    """

    def __init__(self, message, crashed=True):
        super().__init__(message)
        self.crashed = crashed


def _run_child(spec, timeout):
    """Run the child script with ``spec``; it sees the parent's ``sys.path`` (the same torch and libraries)."""
    path = [p for p in sys.path if p] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(path)))
    return subprocess.run([sys.executable, '-c', _CHILD, json.dumps(spec)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def mode():
    """``'raise'``, ``'warn'`` or ``'off'`` from ``FSDLITE_OPS_SMOKE`` (1 / warn / 0)."""
    value = os.environ.get(SMOKE_ENV, '1').strip().lower()
    if value in ('0', 'off', 'false', 'no'):
        return 'off'
    return 'warn' if value == 'warn' else 'raise'


def compiler_version(compiler=None):
    """First line of ``<compiler> --version`` (the C++ compiler torch's JIT builds use: ``$CXX`` or ``c++``)."""
    compiler = compiler or os.environ.get('CXX', 'c++')
    if shutil.which(compiler) is None:
        return f'{compiler}: not found'
    try:
        out = subprocess.run([compiler, '--version'], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f'{compiler}: {exc}'
    return out.splitlines()[0] if out else f'{compiler}: no version'


def torch_compiler():
    """The compiler torch was built with, as ``torch.__config__.show()`` names it (e.g. ``GCC 13.3``)."""
    for line in torch.__config__.show().splitlines():
        if line.strip().startswith('- GCC') or line.strip().startswith('- clang'):
            return line.strip()[2:]
    return 'unknown'


def smoke_test(libraries, devices=None, calls=None, timeout=300):
    """Make one known invalid call per op family in a fresh process; return its report lines.

    Args:
        libraries (Sequence[tuple[str, str]]): ``(family, path of its built .so)``; families without an entry in
            :data:`CALLS` (and ``calls``) are only loaded.
        devices (Sequence[str], optional): default ``['cpu']`` plus ``'cuda'`` when a GPU is available.
        calls (dict, optional): family -> Python expression to run instead of :data:`CALLS` (tests).
        timeout (float): seconds for the subprocess.
    Returns:
        list[str]: the subprocess's ``[smoke]`` lines (one ``ok`` per family and device).
    Raises:
        OpsSmokeTestError: the subprocess died (a signal: the crash this test exists for), timed out, or an
            invalid call returned without raising.
    """
    calls = CALLS if calls is None else calls
    if devices is None:
        devices = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])
    spec = dict(libraries=[[f, str(p)] for f, p in libraries], devices=list(devices), expected=list(EXPECTED),
                calls=[[f, calls[f]] for f, _ in libraries if f in calls])
    try:
        proc = _run_child(spec, timeout)
    except subprocess.TimeoutExpired as exc:
        raise OpsSmokeTestError(f'op smoke test: no answer in {timeout} s\n{exc.stdout or ""}{exc.stderr or ""}',
                                crashed=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith('[smoke]')]
    if proc.returncode == 0:
        return lines
    tried = [line for line in lines if line.startswith('[smoke] try ')]
    if proc.returncode < 0:
        what = f'was killed by {signal.Signals(-proc.returncode).name}'
    elif proc.returncode == 3:
        what = 'made an invalid call that did not raise'
    else:
        what = f'exited with code {proc.returncode}'
    raise OpsSmokeTestError(
        f'op smoke test: the process {what}'
        + (f' at "{tried[-1][len("[smoke] try "):]}"' if tried else '') + '.\n'
        'An error raised by an fsdlite op library must reach Python as an exception; here it does not, so any bad '
        'argument would crash a training run. Toolchain: library compiler ' + compiler_version()
        + f'; torch {torch.__version__} built with {torch_compiler()}; Python {sys.version.split()[0]}.\n'
        + '\n'.join(lines[-6:]) + ('\n' + proc.stderr[-3000:] if proc.stderr else '')
        + f'\n(set {SMOKE_ENV}=warn to report and go on, {SMOKE_ENV}=0 to skip the check)',
        crashed=proc.returncode < 0 or proc.returncode == 3)


def diagnose(selftest_library, devices=None, timeout=120):
    """Run every self-test mode (:data:`MODES`) in its own process: which ways of raising survive here.

    Args:
        selftest_library (str | Path): the built ``selftest`` family.
        devices (Sequence[str], optional): default ``['cpu']`` plus ``'cuda'`` when a GPU is available (the CUDA
            dispatch throws from nvcc-compiled host code).
    Returns:
        list[str]: one line per mode and device, ``ok`` or what went wrong (``CRASH SIGSEGV`` ...).
    """
    if devices is None:
        devices = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])
    lines = []
    for mode, (what, expected) in MODES.items():
        for dev in devices:
            if mode == 3 and dev != 'cpu':
                continue
            code = (f"out = F._raise_error(torch.zeros(1, device=dev), {mode}); print('[smoke] returned', "
                    "tuple(out.shape))")
            spec = dict(libraries=[['selftest', str(selftest_library)]], devices=[dev], expected=list(EXPECTED),
                        calls=[['selftest', code]])
            try:
                proc = _run_child(spec, timeout)
            except subprocess.TimeoutExpired:
                lines.append(f'mode {mode} on {dev} ({what}): TIMEOUT')
                continue
            out = proc.stdout
            if proc.returncode < 0:
                got = f'CRASH {signal.Signals(-proc.returncode).name}'
            elif expected is None:
                got = 'ok (returned)' if '[smoke] returned' in out else f'unexpected: {out.splitlines()[-1:]}'
            elif f'[smoke] ok selftest {dev}: {expected}' in out:
                got = f'ok ({expected})'
            else:
                got = f'unexpected (exit {proc.returncode}): {(out + proc.stderr).strip().splitlines()[-1:]}'
            lines.append(f'mode {mode} on {dev} ({what}): {got}')
    return lines


__all__ = ['SMOKE_ENV', 'CALLS', 'MODES', 'OpsSmokeTestError', 'mode', 'compiler_version', 'torch_compiler',
           'smoke_test', 'diagnose']
