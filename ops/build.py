"""Build system of the in-repo op library (``fsdlite.ops``).

Every op family is a folder ``ops/<family>/`` holding

* ``<family>.cpp``        – ``TORCH_LIBRARY_FRAGMENT(fsdlite, m)`` schemas (+ shared dispatch code),
* ``<family>_cpu.cpp``    – ``TORCH_LIBRARY_IMPL(fsdlite, CPU, m)`` multithreaded kernels,
* ``<family>_cuda.cu``    – ``TORCH_LIBRARY_IMPL(fsdlite, CUDA, m)`` kernels,
* ``__init__.py``         – typed Python API, argument checks, ``register_fake``, autograd,
* ``reference.py``        – pure-torch reference used by tests and benchmarks.

Each family compiles into its own shared library with :func:`torch.utils.cpp_extension.load` (ninja, cached
under ``TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions``), so one family's edit never rebuilds or breaks
another.  Nothing is built on import: importing ``fsdlite.ops`` turns ``torch.ops.fsdlite`` into a namespace that
builds and loads a family the first time one of its ops is looked up (every Python wrapper calls its op through
``torch.ops.fsdlite``, so the first call builds), or ahead of time with the command below.  The schemas are read
from the ``m.def("name(...)")`` lines of the C++ sources, so the namespace knows which family defines which op.
A family's fake kernels and autograd formulas are declared at import (:func:`register_autograd`,
``fsdlite.ops._checks.register_fake``) and registered with torch right after its library loads.  CUDA sources
join the build only when torch has CUDA.  Without a GPU, ``python -m fsdlite.ops --nvcc-check``
compile-checks every ``.cu`` with ``nvcc`` (one unity translation unit, so torch's headers are parsed once).

Every fresh build is followed by :mod:`fsdlite.ops.smoke`: one known invalid call of the new library in a
subprocess must raise a Python exception (on one toolchain every C++ error crashed the process instead).

Command line (the prebuild command)::

    python -m fsdlite.ops                 # build every family now (and smoke-test what was compiled)
    python -m fsdlite.ops --smoke         # build if needed, then smoke-test every family
    python -m fsdlite.ops --smoke --diagnose  # ... and report which ways of raising survive here
    python -m fsdlite.ops --nvcc-check    # compile-check CUDA sources with nvcc (sm_80 and sm_90)
"""
import argparse
import hashlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from . import smoke as _smoke

OPS_ROOT = Path(__file__).resolve().parent
INCLUDE_DIR = OPS_ROOT / 'include'
NAMESPACE = 'fsdlite'
_LOADED = {}        # family -> build dir, once its library is loaded
_READY = set()      # families whose library is loaded and whose fake kernels / autograd are registered
_ON_LOAD = {}       # family -> registrations waiting for its library
_OP_FAMILY = None   # op name -> family, read from the C++ schemas
_LOCK = threading.RLock()
_SCHEMA = re.compile(r'\bm\.def\(\s*"([A-Za-z_]\w*)\s*\(')


def families():
    """Names of the op families that have C++ sources, sorted."""
    return sorted(p.name for p in OPS_ROOT.iterdir()
                  if p.is_dir() and (p / f'{p.name}.cpp').is_file())


def cuda_enabled():
    """True when the CUDA kernels are built into the libraries (torch built with CUDA)."""
    return torch.version.cuda is not None and torch.cuda.is_available()


def _sources(family, with_cuda):
    folder = OPS_ROOT / family
    sources = sorted(str(p) for p in folder.glob('*.cpp'))
    if with_cuda:
        sources += sorted(str(p) for p in folder.glob('*.cu'))
    return sources


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def included_headers(sources):
    """Every header the sources include with ``#include "..."``, transitively (resolved next to the including file,
    then in ``ops/include``), sorted; torch's own headers (``<...>``) are not followed.

    Args:
        sources (Iterable[str | Path]): C++/CUDA source files.
    Returns:
        list[Path]: the headers found.
    """
    seen, todo = set(), [Path(s) for s in sources]
    while todo:
        including = todo.pop()
        for name in _INCLUDE.findall(including.read_text(errors='replace')):
            found = [c for c in (including.parent / name, INCLUDE_DIR / name) if c.is_file()]
            header = found[0].resolve() if found else None
            if header is not None and header not in seen:
                seen.add(header)
                todo.append(header)
    return sorted(seen)


def headers_digest(sources):
    """sha1 of the contents of :func:`included_headers`: part of the build flags, so an edit of a header rebuilds
    the families that include it (torch's JIT versioner hashes only the listed sources)."""
    digest = hashlib.sha1()
    for header in included_headers(sources):
        digest.update(header.name.encode())
        digest.update(header.read_bytes())
    return digest.hexdigest()[:16]


def library_name(family):
    """Extension name; salted with this checkout's path so clones never share a cache entry."""
    salt = hashlib.sha1(str(OPS_ROOT).encode()).hexdigest()[:8]
    return f'{NAMESPACE}_{family}_{salt}'


def _build_dir(family):
    from torch.utils.cpp_extension import _get_build_directory
    return Path(_get_build_directory(library_name(family), verbose=False))


def library_path(family):
    """Path of the family's newest built shared library (None before the first build; torch's JIT names a rebuild
    within one process ``<name>_v<N>.so``)."""
    built = list(_build_dir(family).glob(f'{library_name(family)}*.so'))
    return max(built, key=lambda p: p.stat().st_mtime) if built else None


def _library_stamp(family):
    path = library_path(family)
    return None if path is None else (str(path), path.stat().st_mtime_ns)


def smoke_check(selected=None, devices=None):
    """Smoke-test the built libraries of the selected families (default: every family, built if needed) in one
    subprocess (:func:`fsdlite.ops.smoke.smoke_test`); returns its report lines.

    Raises:
        OpsSmokeTestError: a known invalid call crashed the process (or did not raise); the message ends with
            :func:`diagnosis`.
    """
    selected = list(selected or families())
    for family in selected:
        load_family(family)
    try:
        return _smoke.smoke_test([(f, library_path(f)) for f in selected], devices=devices)
    except _smoke.OpsSmokeTestError as exc:
        raise _smoke.OpsSmokeTestError(f'{exc}\n' + '\n'.join(diagnosis(devices)), exc.crashed) from None


def diagnosis(devices=None):
    """:func:`fsdlite.ops.smoke.diagnose` on the ``selftest`` family (built if needed): which ways of raising an
    error survive on this toolchain, one line per mode and device."""
    try:
        with _smoke_disabled():
            load_family('selftest')
    except Exception as exc:  # the diagnosis must not hide the error it explains
        return [f'[diagnosis] the selftest family could not be built: {type(exc).__name__}: {exc}']
    return ['[diagnosis] ' + line for line in _smoke.diagnose(library_path('selftest'), devices)]


class _smoke_disabled:
    """Within the block builds skip their own smoke test (the diagnosis builds the self-test family)."""

    def __enter__(self):
        self.previous = os.environ.get(_smoke.SMOKE_ENV)
        os.environ[_smoke.SMOKE_ENV] = '0'

    def __exit__(self, *exc):
        if self.previous is None:
            os.environ.pop(_smoke.SMOKE_ENV, None)
        else:
            os.environ[_smoke.SMOKE_ENV] = self.previous


def _smoke_after_build(family):
    """The post-build smoke test of one freshly compiled family, as ``FSDLITE_OPS_SMOKE`` asks."""
    mode = _smoke.mode()
    if mode == 'off':
        return
    try:
        _smoke.smoke_test([(family, library_path(family))])
    except _smoke.OpsSmokeTestError as exc:
        if not exc.crashed:  # the check could not run here (not a verdict on the library): say so and go on
            print(f'[fsdlite.ops] WARNING the post-build smoke test of {family!r} did not run: {exc}', file=sys.stderr,
                  flush=True)
            return
        report = f'{exc}\n' + '\n'.join(diagnosis()) if family != 'selftest' else str(exc)
        if mode == 'raise':
            _LOADED.pop(family, None)
            raise _smoke.OpsSmokeTestError(report) from None
        print(f'[fsdlite.ops] WARNING {report}', file=sys.stderr, flush=True)


def op_families():
    """``{op name: family}`` for every op schema (``m.def("name(...")``) in the families' C++ sources."""
    global _OP_FAMILY
    if _OP_FAMILY is None:
        found = {}
        for family in families():
            for source in sorted((OPS_ROOT / family).glob('*.cpp')):
                for name in _SCHEMA.findall(source.read_text(errors='replace')):
                    found[name] = family
        _OP_FAMILY = found
    return _OP_FAMILY


def family_of(op):
    """The family whose library defines ``op`` (``'name'`` or ``'fsdlite::name'``).

    Raises:
        ValueError: no family defines it.
    """
    name = op.split('::')[-1]
    family = op_families().get(name)
    if family is None:
        raise ValueError(f'op={op!r} is defined by no op family (no m.def("{name}(...)") in ops/*/*.cpp)')
    return family


def when_loaded(op, register):
    """Call ``register()`` once the library defining ``op`` is loaded: at once when it is, else right after the
    load (the family's Python registrations need the op's schema, which only the library holds)."""
    family = family_of(op)
    with _LOCK:
        if family in _READY:
            register()
        else:
            _ON_LOAD.setdefault(family, []).append(register)


def register_autograd(op, backward, setup_context=None):
    """``torch.library.register_autograd(op, ...)``, done when the op's library loads (see :func:`when_loaded`)."""
    when_loaded(op, lambda: torch.library.register_autograd(op, backward, setup_context=setup_context))


def _register(family):
    """Import the family's Python module (which declares its registrations) and run what waits for its library."""
    importlib.import_module(f'{__package__}.{family}')
    while _ON_LOAD.get(family):
        _ON_LOAD[family].pop(0)()
    _ON_LOAD.pop(family, None)
    _READY.add(family)


class _LazyOpNamespace(torch._ops._OpNamespace):
    """``torch.ops.fsdlite``: looking up an op of a family not loaded yet builds (if needed) and loads it first."""

    # torch names an op's module after its namespace class's module ('torch._ops.fsdlite'); inductor's cache finds
    # ops by that name
    __module__ = torch._ops._OpNamespace.__module__

    def __getattr__(self, op_name):
        family = op_families().get(op_name)
        if family is not None and family not in _READY:
            load_family(family)
        return super().__getattr__(op_name)


def _install_lazy_namespace():
    namespace = getattr(torch.ops, NAMESPACE)  # created by torch.ops on first access; keep it (and its cached ops)
    if not isinstance(namespace, _LazyOpNamespace):
        namespace.__class__ = _LazyOpNamespace


def load_family(family):
    """Build (if needed) and load the shared library of one op family and register its fake kernels and autograd;
    idempotent. Called by the first lookup of one of its ops in ``torch.ops.fsdlite``.

    Args:
        family (str): folder name under ``ops/``.
    Returns:
        str: path of the loaded library.
    """
    with _LOCK:
        if family in _LOADED:  # (while its registrations run, a lookup of its ops in this thread lands here)
            return _LOADED[family]
        if family not in families():
            raise ValueError(f'family={family!r} is not an op family; expected one of {families()}')
        from torch.utils import cpp_extension

        with_cuda = cuda_enabled()
        name = library_name(family)
        build_dir = _build_dir(family)
        before = _library_stamp(family)
        if before is None:
            print(f'[fsdlite.ops] compiling op family {family!r} (first use; cached in {build_dir}) ...',
                  file=sys.stderr, flush=True)
        start = time.time()
        sources = _sources(family, with_cuda)
        cflags = ['-O3', '-fopenmp', '-DNDEBUG', f'-DFSDLITE_HEADERS={headers_digest(sources)}']
        cuda_flags = ['-O3', '--expt-relaxed-constexpr']
        if with_cuda:
            cflags.append('-DFSDLITE_WITH_CUDA')
        cpp_extension.load(
            name=name,
            sources=sources,
            extra_include_paths=[str(INCLUDE_DIR)],
            extra_cflags=cflags,
            extra_cuda_cflags=cuda_flags if with_cuda else None,
            extra_ldflags=['-fopenmp'],
            is_python_module=False,
            verbose=os.environ.get('FSDLITE_OPS_VERBOSE', '0') == '1',
        )
        _LOADED[family] = str(build_dir)
        if _library_stamp(family) != before:  # compiled now (first use or a source edit): check errors raise
            _smoke_after_build(family)
            print(f'[fsdlite.ops] {family!r} ready in {time.time() - start:.1f}s', file=sys.stderr, flush=True)
        try:
            _register(family)
        except BaseException:
            _LOADED.pop(family, None)
            raise
        return _LOADED[family]


_install_lazy_namespace()


def prebuild(selected=None):
    """Build every (or the selected) op family now instead of on first use."""
    for family in selected or families():
        load_family(family)
    return list(selected or families())


# --------------------------------------------------------------------------------------- nvcc
_STUB_MACROS = '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n'
NVCC_FLAGS = [
    '-std=c++20', '--expt-relaxed-constexpr', '-D__CUDA_NO_HALF_OPERATORS__', '-D__CUDA_NO_HALF_CONVERSIONS__',
    '-D__CUDA_NO_BFLOAT16_CONVERSIONS__', '-D__CUDA_NO_HALF2_OPERATORS__', '-Xcompiler', '-fPIC',
    '-DFSDLITE_WITH_CUDA',
]
DEFAULT_ARCHS = ('80', '90')


def cuda_sources(selected=None):
    """All ``.cu`` files of the selected families."""
    return [p for f in (selected or families()) for p in sorted((OPS_ROOT / f).glob('*.cu'))]


def nvcc_check(selected=None, archs=DEFAULT_ARCHS, separate=False, nvcc=None):
    """Compile-check the CUDA sources with nvcc (no linking, no GPU needed).

    All ``.cu`` files are compiled as one unity translation unit (each file keeps its
    kernels in its own namespace), or one by one with ``separate=True``.

    Returns:
        int: 0 when every file compiled (or nvcc is absent: the reason is printed), else 1.
    """
    nvcc = nvcc or shutil.which('nvcc')
    files = cuda_sources(selected)
    if nvcc is None:
        print('[nvcc-check] SKIPPED: nvcc is not on PATH, CUDA sources were not compile-checked')
        return 0
    if not files:
        print('[nvcc-check] no .cu sources')
        return 0
    from torch.utils.cpp_extension import include_paths
    with tempfile.TemporaryDirectory(prefix='fsdlite-nvcc-') as tmp:
        tmp = Path(tmp)
        stub = tmp / 'stub' / 'c10' / 'cuda' / 'impl'
        stub.mkdir(parents=True)
        (stub / 'cuda_cmake_macros.h').write_text(_STUB_MACROS)
        includes = [f'-I{p}' for p in include_paths()] + [f'-I{tmp / "stub"}', f'-I{INCLUDE_DIR}']
        gencode = [f'-gencode=arch=compute_{a},code=sm_{a}' for a in archs]
        if separate:
            units = [(f.name, f) for f in files]
        else:
            unity = tmp / 'all_ops_unity.cu'
            unity.write_text(''.join(f'#include "{f}"\n' for f in files))
            units = [(f'{len(files)} files (unity build)', unity)]
        failed = 0
        for label, unit in units:
            start = time.time()
            cmd = [nvcc, '-c', str(unit), '-o', str(tmp / 'out.o'), *NVCC_FLAGS, *includes, *gencode]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            status = 'ok' if proc.returncode == 0 else 'FAILED'
            print(f'[nvcc-check] {label}: {status} ({time.time() - start:.0f}s, sm_{",sm_".join(archs)})')
            if proc.returncode != 0:
                failed += 1
                print(proc.stdout[-4000:], proc.stderr[-8000:], sep='\n')
        for f in files:
            print(f'[nvcc-check]   {f.relative_to(OPS_ROOT)}')
    return 1 if failed else 0


def main(argv=None):
    """Command line (see the module docstring): build the given families (default all) or, with ``--nvcc-check``,
    compile-check their CUDA sources; returns the exit code (0 = success)."""
    parser = argparse.ArgumentParser(prog='python -m fsdlite.ops', description=__doc__.split('\n\n')[0])
    parser.add_argument('families', nargs='*', help='op families to build (default: all)')
    parser.add_argument('--nvcc-check', action='store_true', help='compile-check the CUDA sources with nvcc')
    parser.add_argument('--separate', action='store_true', help='with --nvcc-check: one nvcc call per file')
    parser.add_argument('--arch', action='append', help='with --nvcc-check: SM architectures (default 80 and 90)')
    parser.add_argument('--smoke', action='store_true',
                        help='build if needed, then check that a known invalid call of each family raises')
    parser.add_argument('--diagnose', action='store_true',
                        help='with --smoke: also run every error-propagation self-test mode, each in its own process')
    args = parser.parse_args(argv)
    unknown = sorted(set(args.families) - set(families()))
    if unknown:
        parser.error(f'unknown op families {unknown}; expected some of {families()}')
    if args.nvcc_check:
        return nvcc_check(args.families or None, archs=tuple(args.arch or DEFAULT_ARCHS), separate=args.separate)
    start = time.time()
    if args.smoke:
        try:
            lines = smoke_check(args.families or None)
        except _smoke.OpsSmokeTestError as exc:
            print(f'[fsdlite.ops] SMOKE TEST FAILED: {exc}')
            return 1
        if args.diagnose:
            lines += diagnosis()
        print('\n'.join(lines))
        print(f'[fsdlite.ops] smoke test passed: {sum(line.startswith("[smoke] ok ") for line in lines)} invalid calls raised '
              f'({time.time() - start:.1f}s)')
        return 0
    built = prebuild(args.families or None)
    print(f'[fsdlite.ops] {len(built)} op families ready ({", ".join(built)}) in {time.time() - start:.1f}s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
