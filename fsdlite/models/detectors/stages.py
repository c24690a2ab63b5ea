"""Per-stage wall-clock timing of the detectors (off unless :func:`record_stages` is active).

The detectors wrap their stages in ``with stage('backbone'): ...``; ``benchmarks/fsd_latency.py`` reads the
times.  Inactive, a stage costs one global lookup and adds nothing to traced or exported graphs.
"""
import time
from collections import defaultdict
from contextlib import contextmanager

_active = None


@contextmanager
def stage(name):
    """Add the block's wall time (s) to ``name`` in the active recorder (no-op when none is active)."""
    if _active is None:
        yield
        return
    record, start = _active, time.perf_counter()
    try:
        yield
    finally:
        record[name] += time.perf_counter() - start


@contextmanager
def record_stages():
    """Record stage times: yields a dict ``name -> seconds`` (summed over repeated stages)."""
    global _active
    previous, _active = _active, defaultdict(float)
    try:
        yield _active
    finally:
        _active = previous


__all__ = ['stage', 'record_stages']
