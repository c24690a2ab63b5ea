"""segment_reduce: sum / mean / max / min / mul (product) of rows grouped by an index, with backward.

Semantics follow torch_scatter: an empty segment yields 0 (1 for 'mul', and arg ``N`` for max/min), ties
pick the first row, NaN values never win a max/min, integer means use floor division. Integer sums and
products wrap as in torch; int8/int16/uint8 means are exact floors (their sums accumulate in int64); a bool
sum is 'any', a bool product 'all' (no bool mean).
"""
import math

import torch

from .. import _checks
from ..build import register_autograd


REDUCTIONS = ('sum', 'mean', 'max', 'min', 'mul')
SRC_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
              torch.int8, torch.uint8, torch.bool)
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
    ctx.save_for_backward(index, arg, src if reduce == 'mul' else None)
    ctx.mark_non_differentiable(arg)


def _mul_backward(grad_out, src, index):
    """Gradient of a segment product: the product of the segment's other rows (exact with zeros: a zero row gets the
    product of the rest when it is its segment's only zero, every other row of a segment holding a zero gets 0)."""
    num_segments = grad_out.shape[0]
    zero = src == 0
    nonzero = torch.where(zero, torch.ones_like(src), src)
    product = torch.ops.fsdlite.segment_reduce(nonzero, index, num_segments, 'mul')[0].index_select(0, index)
    zeros = torch.ops.fsdlite.segment_reduce(zero.to(src.dtype), index, num_segments, 'sum')[0].index_select(0, index)
    factor = torch.where(zero, (zeros == 1).to(src.dtype), (zeros == 0).to(src.dtype) / nonzero)
    return grad_out.index_select(0, index) * product * factor


def _backward(ctx, grad_out, _grad_arg):
    index, arg, src = ctx.saved_tensors
    n = ctx.num_rows
    if ctx.reduce == 'mul':
        return _mul_backward(grad_out, src, index), None, None, None
    if ctx.reduce in ('sum', 'mean'):
        grad = grad_out.index_select(0, index)
        if ctx.reduce == 'mean':  # counts by index_add (fixed size, unlike bincount: traceable by torch.compile)
            count = grad_out.new_zeros(grad_out.shape[0]).index_add_(0, index, grad_out.new_ones(n)).clamp_(min=1)
            grad = grad / count.index_select(0, index).view(-1, *([1] * (grad.dim() - 1)))
        return grad, None, None, None
    # max/min: route each segment's gradient to its winning row; empty segments (arg == N) to a dump row.
    grad = grad_out.new_zeros((n + 1,) + tuple(grad_out.shape[1:]))
    grad = grad.scatter_add(0, arg, grad_out)
    return grad[:n], None, None, None


register_autograd('fsdlite::segment_reduce', _backward, setup_context=_setup_context)


def _validated(src, index, num_segments, reduce):
    _checks.tensor(_OP, 'src', src, dtypes=SRC_DTYPES, min_dim=1)
    _checks.tensor(_OP, 'index', index, dtypes=_checks.INDEX_DTYPES, dim=1, size={0: (src.shape[0], 'src.shape[0]')})
    _checks.same_device(_OP, src=src, index=index)
    _checks.choice(_OP, 'reduce', reduce, REDUCTIONS)
    if reduce == 'mean' and src.dtype == torch.bool:
        raise _checks.OpTypeError(f"{_OP}: reduce='mean' needs a numeric src, got dtype torch.bool")
    name = 'num_segments'
    if num_segments is None:
        num_segments = int(index.max()) + 1 if index.numel() else 0
        name = 'num_segments (index.max() + 1)'
    num_segments = _checks.positive_int(_OP, 'num_segments', num_segments, allow_zero=True)
    arg_size = 8 if reduce in ('max', 'min') else 0  # the int64 arg beside the values
    _checks.output_memory(_OP, name, num_segments, math.prod(src.shape[1:]), 'elements per row of src',
                          src.element_size() + arg_size, src.device)
    return index.long(), num_segments


def segment_reduce(src, index, num_segments=None, reduce='sum'):
    """Reduce the rows of ``src`` into segments.

    Args:
        src (Tensor): (N, *F) values (floating, integer or bool).
        index (Tensor): (N,) int64/int32 segment id of each row, in ``[0, num_segments)``.
        num_segments (int, optional): S; defaults to ``index.max() + 1`` (a device sync).
        reduce (str): 'sum', 'mean', 'max', 'min' or 'mul' (product).
    Returns:
        Tensor: (S, *F) reduced values; empty segments are 0 (1 for 'mul').
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
