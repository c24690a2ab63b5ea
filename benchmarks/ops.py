"""Benchmark every fsdlite op against its pure-torch reference (and peers), side by side.

Each op family contributes ``benchmarks/op_cases/<family>.py`` defining

    def cases(quick: bool) -> list[dict]

where every case is ``dict(op=str, size=str, variants={label: zero-arg callable},
baseline=label_of_the_reference, memory=optional dict(script=..., function=..., kwargs=...,
variants=[labels]))``.  Times are medians; the ratio column is baseline time / variant
time (> 1 means faster than the reference).  Peak memory, where a case asks for it,
is measured per variant in a fresh subprocess.

    python benchmarks/ops.py [--quick] [--only voxelize segment_reduce ...] [--threads N]
    python benchmarks/ops.py --scaling knn [--threads N]   # peak memory vs size (knn, grid_subsample, ...)
"""
import argparse
import importlib
import math
from pathlib import Path

import torch

import _harness as h

from fsdlite.engine.tool_setup import number

CASE_DIR = Path(__file__).resolve().parent / 'op_cases'


def case_families():
    """Names of the op benchmark cases (``op_cases/<family>.py``)."""
    return [p.stem for p in sorted(CASE_DIR.glob('*.py')) if not p.stem.startswith('_')]


def load_case_modules(only=None):
    """``(family, module)`` of every case module ``op_cases.<family>`` (or of those in ``only``)."""
    return [(family, importlib.import_module(f'op_cases.{family}')) for family in case_families()
            if not only or family in only]


def main(argv=None):
    """Command line (see the module docstring): time every case of the selected families, print the table and the
    ``RESULT`` line."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='small sizes (smoke run)')
    parser.add_argument('--only', nargs='*', choices=case_families(), metavar='FAMILY',
                        help=f'op families to run (of {", ".join(case_families())})')
    parser.add_argument('--threads', type=number(int, 1), default=torch.get_num_threads())
    parser.add_argument('--repeat', type=number(int, 1), default=3)
    parser.add_argument('--scaling', choices=[f for f in case_families()
                                              if 'def scaling(' in (CASE_DIR / f'{f}.py').read_text()],
                        metavar='FAMILY', help="instead of the table: the family's peak memory at growing sizes (fresh "
                                               'processes) and the size that would fill 8 GiB')
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.scaling:
        return dict(load_case_modules([args.scaling]))[args.scaling].scaling(args.threads)
    print(f'torch {torch.__version__}, {args.threads} threads, {"quick" if args.quick else "full"} sizes')
    rows, result = [], {}
    for family, module in load_case_modules(args.only):
        for case in module.cases(args.quick):
            times = {label: h.time_call(fn, repeat=args.repeat) for label, fn in case['variants'].items()}
            base = times[case['baseline']]
            peaks = {}
            mem = case.get('memory')
            if mem:
                for label in mem['variants']:
                    peaks[label] = h.run_isolated(mem['script'], mem['function'],
                                                  dict(mem.get('kwargs', {}), variant=label),
                                                  threads=args.threads)['peak_bytes']
            for label, t in times.items():
                ratio = base / t if t > 0 else math.inf
                rows.append([case['op'], case['size'], label, f'{t * 1e3:.2f}',
                             '—' if label == case['baseline'] else f'{ratio:.2f}x',
                             h.fmt_bytes(peaks[label]) if label in peaks else ''])
                result[f'{case["op"]}|{case["size"]}|{label}'] = {
                    'ms': round(t * 1e3, 3), 'speedup_vs_baseline': round(ratio, 3),
                    **({'peak_bytes': peaks[label]} if label in peaks else {})}
    h.print_table(['op', 'size', 'variant', 'ms', 'vs reference', 'peak mem'], rows)
    h.print_result(result)


if __name__ == '__main__':
    main()
