"""The execution mode of a forward: dynamic shapes (default) or fixed shapes with dump slots.

One setting, read by the shared row operations below, decides how a module's gathers and segment reductions run,
so a module has one forward for both runs instead of a ``padded`` argument per call:

* ``'dynamic'``: indices are valid rows; the reductions run ``fsdlite.ops.segment_reduce`` (fused CPU/CUDA
  kernels), the gathers ``index_select``;
* ``'fixed'``: tensors are padded to bounds, and an index equal to the number of rows (or segments) is the dump
  slot: gathers read zeros there and reductions discard it; both are export-safe standard ops
  (:mod:`~fsdlite.models.layers.static_ops`).

A fixed-shape forward runs inside ``with fixed_shapes():`` (the detectors' ``forward_static``); the setting is a
context variable, so it follows the call and ends with the block.
"""
import contextlib
import contextvars

from fsdlite.ops import segment_reduce as fused_segment_reduce

from .static_ops import gather_rows, static_segment_reduce

EXECUTION_MODES = ('dynamic', 'fixed')
_MODE = contextvars.ContextVar('fsdlite_execution_mode', default='dynamic')


def execution_mode():
    """The current mode: ``'dynamic'`` or ``'fixed'`` (see the module docstring)."""
    return _MODE.get()


@contextlib.contextmanager
def fixed_shapes():
    """Run the block in the ``'fixed'`` mode (padded tensors, dump slots); the previous mode comes back after."""
    token = _MODE.set('fixed')
    try:
        yield
    finally:
        _MODE.reset(token)


def segment_reduce(src, index, num_segments, reduce='sum'):
    """(S, *F) reduction of the rows of ``src`` (N, *F) into ``num_segments`` segments by ``index`` (N,) int64
    ('sum', 'mean', 'max', 'min'; empty segments 0); in the fixed mode ``index == num_segments`` rows are
    discarded."""
    if _MODE.get() == 'fixed':
        return static_segment_reduce(src, index, num_segments, reduce)
    return fused_segment_reduce(src, index, num_segments, reduce)


def gather(src, index):
    """(M, *F) rows ``src[index]`` of ``src`` (N, *F) for ``index`` (M,) int64; in the fixed mode ``index == N``
    reads zeros."""
    if _MODE.get() == 'fixed':
        return gather_rows(src, index)
    return src.index_select(0, index)


__all__ = ['EXECUTION_MODES', 'execution_mode', 'fixed_shapes', 'gather', 'segment_reduce']
