"""Scaffolding shared by the op benchmark cases (the case format is described in ``benchmarks/ops.py``).

* :func:`case` builds one case from a module's ``work(variant, **kwargs)`` function (also the entry point
  that measures a variant's peak memory in a fresh process),
* :func:`scaling_samples` / :func:`fit_8gib` / :func:`print_samples` measure the op at growing sizes and
  extrapolate the size that would fill 8 GiB (``python benchmarks/ops.py --scaling FAMILY`` runs a case module's
  ``scaling(threads)``).

The case modules live in the package ``op_cases`` under ``benchmarks/``, the first import folder of every benchmark
script and of the fresh processes of ``_harness.run_isolated``.
"""
import inspect
from pathlib import Path

import _harness as h

LIMIT_BYTES = 8 * 2**30


def case(op, size, work, variants, baseline, /, measure_memory=True, **kwargs):
    """One benchmark case of ``op``: ``work(variant=..., **kwargs)`` per variant, peak memory per variant.

    Args:
        op (str): op name shown in the table.
        size (str): workload description.
        work (callable): module-level ``work(variant=label, **kwargs) -> zero-arg callable``.
        variants (sequence[str]): variant labels.
        baseline (str): label of the variant the others are compared with.
        measure_memory (bool): measure each variant's peak memory in a fresh process.
        **kwargs: JSON-serialisable workload arguments of ``work``.
    Returns:
        dict: the case (``op, size, baseline, variants, memory``; memory is None without measurement).
    """
    memory = dict(script=str(Path(inspect.getfile(work)).resolve()), function=work.__name__, kwargs=kwargs,
                  variants=list(variants))
    return dict(op=op, size=size, baseline=baseline, variants={v: work(variant=v, **kwargs) for v in variants},
                memory=memory if measure_memory else None)


def scaling_samples(work, runs, threads):
    """Seconds and peak memory of ``work(**kwargs)()`` in fresh processes.

    Args:
        work (callable): module-level work function (called in the child by its script and name).
        runs (list[tuple[int, dict]]): ``(points, kwargs)`` per run, growing sizes.
        threads (int): torch threads in the child.
    Returns:
        list[tuple[int, int, float]]: ``(points, peak_bytes, seconds)`` per run.
    """
    script = str(Path(inspect.getfile(work)).resolve())
    samples = []
    for points, kwargs in runs:
        res = h.run_isolated(script, work.__name__, kwargs, threads=threads)
        samples.append((points, res['peak_bytes'], res['seconds']))
    return samples


def sample_row(points, peak_bytes, seconds):
    """Table cells ``[points, s, peak, bytes/point]`` of one sample."""
    return [f'{points:,}', f'{seconds:.2f}', h.fmt_bytes(peak_bytes), f'{peak_bytes / points:.0f}']


def print_samples(samples):
    """Table of ``(points, peak_bytes, seconds)`` samples."""
    h.print_table(['points', 's', 'peak', 'bytes/point'], [sample_row(*s) for s in samples])


def fit_8gib(samples, name, threads):
    """Linear fit of peak memory over points (first and last sample) and the size filling 8 GiB; prints it.

    Returns:
        dict: ``bytes_per_point``, ``points_within_8GiB``, ``seconds_at_limit_est`` (linear in time too).
    """
    (n0, b0, _), (n1, b1, t1) = samples[0], samples[-1]
    per_point = (b1 - b0) / (n1 - n0)
    limit = int(n1 + (LIMIT_BYTES - b1) / per_point)
    print(f'{name}: {per_point:.0f} B/point -> ~{limit:,} points within 8 GiB '
          f'(~{t1 * limit / n1:.0f} s at {threads} threads, linear estimate)')
    return {'bytes_per_point': round(per_point, 1), 'points_within_8GiB': limit,
            'seconds_at_limit_est': round(t1 * limit / n1, 1)}
