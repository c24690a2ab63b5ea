"""Per-stage wall-clock timing of the detectors (off unless :func:`record_stages` is active).

The detectors wrap their stages in ``with stage('backbone'): ...``; ``benchmarks/fsd_latency.py`` reads the
times.  Inactive, a stage costs one global lookup and adds nothing to traced or exported graphs.  On a GPU the
recorder takes a ``synchronize`` function (``torch.cuda.synchronize``), called before each stage's clock is read,
so a stage is billed for its own kernels and not for those queued before it.
"""
import time
from collections import defaultdict
from contextlib import contextmanager

_active = None
_synchronize = None


@contextmanager
def stage(name):
    """Add the block's wall time (s) to ``name`` in the active recorder (no-op when none is active)."""
    if _active is None:
        yield
        return
    record, sync = _active, _synchronize
    if sync is not None:
        sync()
    start = time.perf_counter()
    try:
        yield
    finally:
        if sync is not None:
            sync()
        record[name] += time.perf_counter() - start


@contextmanager
def record_stages(synchronize=None):
    """Record stage times: yields a dict ``name -> seconds`` (summed over repeated stages).

    Args:
        synchronize (callable, optional): waits for the device's queued work (``torch.cuda.synchronize``); called
            at both ends of every stage.
    """
    global _active, _synchronize
    previous = _active, _synchronize
    _active, _synchronize = defaultdict(float), synchronize
    try:
        yield _active
    finally:
        _active, _synchronize = previous


__all__ = ['stage', 'record_stages']
