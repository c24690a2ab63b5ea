"""segment_reduce: sum / mean / max / min of rows grouped by an index, with backward.

Semantics follow torch_scatter: an empty segment yields 0 (and arg ``N``), ties pick the
first row, NaN values never win a max/min, integer means use floor division.
"""
import math

import torch

from .. import _checks
from ..build import load_family

load_family('segment_reduce')

REDUCTIONS = ('sum', 'mean', 'max', 'min')
SRC_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64)
_OP = 'segment_reduce'


@_checks.register_fake('fsdlite::segment_reduce')
def _segment_reduce_fake(src, index, num_segments, reduce):
    shape = (num_segments,) + tuple(src.shape[1:])
    out = src.new_empty(shape)
    arg = index.new_empty(shape if reduce in ('max', 'min') else (0,))
    return out, arg


def _setup_context(ctx, inputs, output):
    src, index, num_segments, reduce = inputs
    _, arg = output
    ctx.reduce = reduce
    ctx.num_rows = src.shape[0]
    ctx.save_for_backward(index, arg)
    ctx.mark_non_differentiable(arg)


def _backward(ctx, grad_out, _grad_arg):
    index, arg = ctx.saved_tensors
    n = ctx.num_rows
    if ctx.reduce in ('sum', 'mean'):
        grad = grad_out.index_select(0, index)
        if ctx.reduce == 'mean':
            count = torch.bincount(index, minlength=grad_out.shape[0]).clamp_(min=1)
            grad = grad / count.index_select(0, index).view(-1, *([1] * (grad.dim() - 1))).to(grad.dtype)
        return grad, None, None, None
    # max/min: route each segment's gradient to its winning row; empty segments (arg == N) to a dump row.
    grad = grad_out.new_zeros((n + 1,) + tuple(grad_out.shape[1:]))
    grad = grad.scatter_add(0, arg, grad_out)
    return grad[:n], None, None, None


torch.library.register_autograd('fsdlite::segment_reduce', _backward, setup_context=_setup_context)


def _validated(src, index, num_segments, reduce):
    _checks.tensor(_OP, 'src', src, dtypes=SRC_DTYPES, min_dim=1)
    _checks.tensor(_OP, 'index', index, dtypes=_checks.INDEX_DTYPES, dim=1, size={0: (src.shape[0], 'src.shape[0]')})
    _checks.same_device(_OP, src=src, index=index)
    _checks.choice(_OP, 'reduce', reduce, REDUCTIONS)
    name = 'num_segments'
    if num_segments is None:
        num_segments = int(index.max()) + 1 if index.numel() else 0
        name = 'num_segments (index.max() + 1)'
    num_segments = _checks.positive_int(_OP, 'num_segments', num_segments, allow_zero=True)
    _checks.output_rows(_OP, name, num_segments, math.prod(src.shape[1:]), 'elements per row of src')
    _checks.index_range(_OP, 'index', index, 0, num_segments)
    return index.long(), num_segments


def segment_reduce(src, index, num_segments=None, reduce='sum'):
    """Reduce the rows of ``src`` into segments.

    Args:
        src (Tensor): (N, *F) values (floating or integer).
        index (Tensor): (N,) int64/int32 segment id of each row, in ``[0, num_segments)``.
        num_segments (int, optional): S; defaults to ``index.max() + 1`` (a device sync).
        reduce (str): 'sum', 'mean', 'max' or 'min'.
    Returns:
        Tensor: (S, *F) reduced values; empty segments are 0.
    """
    index, num_segments = _validated(src, index, num_segments, reduce)
    return torch.ops.fsdlite.segment_reduce(src, index, num_segments, reduce)[0]


def segment_max(src, index, num_segments=None):
    """Segment maximum with argmax: returns ((S, *F) values, (S, *F) int64 rows; N where empty)."""
    index, num_segments = _validated(src, index, num_segments, 'max')
    return torch.ops.fsdlite.segment_reduce(src, index, num_segments, 'max')


def segment_min(src, index, num_segments=None):
    """Segment minimum with argmin: returns ((S, *F) values, (S, *F) int64 rows; N where empty)."""
    index, num_segments = _validated(src, index, num_segments, 'min')
    return torch.ops.fsdlite.segment_reduce(src, index, num_segments, 'min')


__all__ = ['segment_reduce', 'segment_max', 'segment_min', 'REDUCTIONS']
