"""torch_scatter-compatible API backed by the ``fsdlite::segment_reduce`` kernel (CPU and CUDA).

Same names, signatures and semantics as pytorch_scatter 2.1, so code ports by changing one import::

    import fsdlite.ops.torch_scatter as torch_scatter      # or: from fsdlite.ops import scatter, scatter_max, ...

* scatter, scatter_{sum, add, mean, mul, min, max}; segment_{coo, csr} and segment_{sum, add, mean, min, max}_{coo,
  csr}; gather_{coo, csr}; scatter_{softmax, log_softmax, logsumexp, std} (composites of the kernel and gather);
* every public function can be scripted (``torch.jit.script``) and traced by ``torch.compile`` (pass ``dim_size`` /
  ``out``, whose defaults read the data, under ``fullgraph=True``);
* output size along ``dim``: ``dim_size`` or ``index.max() + 1``; an empty segment gives 0 (1 for mul) and, for
  max/min, arg ``src.size(dim)``; ties pick the first position; NaN never wins a max/min;
* the index broadcasts as in torch_scatter (a 1-D index runs along ``dim``; ``dim < 0`` allowed);
* a given ``out`` participates for scatter_* / segment_coo (sum adds to it, mul multiplies it, mean divides the sum
  including it by the count, max/min keep its value unless a source value is strictly better) and is overwritten by
  segment_csr / gather_*; it is updated in place and returned;
* src dtypes: float16/32/64, bfloat16, int8/16/32/64, uint8 and bool (no bool mean); integer sums and products
  wrap as in torch; integer mean is floor division (torch_scatter's scatter_mean; its segment_* kernels truncate);
* bad arguments raise :class:`fsdlite.ops._checks.OpValueError` / ``OpTypeError`` naming the argument: each is a
  ``ValueError`` / ``TypeError`` and also the ``RuntimeError`` torch_scatter raises (in scripted code, a
  ``torch.jit.Error`` carrying the same message).

Documented differences, where fsdlite gives the right value and torch_scatter does not:

* indices are validated: negative or out-of-range values raise instead of corrupting memory;
* a segment holding only -inf (max) / +inf (min), or only the dtype's lowest (max) / highest (min) value, returns
  that value and its position; torch_scatter takes it for an empty segment and returns 0 and arg ``src.size(dim)``;
* int8/int16/uint8 means are exact floors (the sum accumulates in int64; torch_scatter's wraps in the dtype);
* scatter_logsumexp of a segment holding only -inf is -inf (torch_scatter: 0), +inf stays +inf (torch_scatter: the
  dtype's largest value), and a given ``out`` takes part in the maximum used to shift the exponentials (no overflow
  when ``out`` is much larger than the segment's values);
* scatter_std's gradient where a deviation is 0 is 0 (torch_scatter: NaN).
"""
from ._composite import scatter_log_softmax, scatter_logsumexp, scatter_softmax, scatter_std
from ._gather import gather_coo, gather_csr
from ._scatter import scatter, scatter_add, scatter_max, scatter_mean, scatter_min, scatter_mul, scatter_sum
from ._segment import (segment_add_coo, segment_add_csr, segment_coo, segment_csr, segment_max_coo, segment_max_csr,
                       segment_mean_coo, segment_mean_csr, segment_min_coo, segment_min_csr, segment_sum_coo,
                       segment_sum_csr)

__all__ = ['scatter', 'scatter_sum', 'scatter_add', 'scatter_mean', 'scatter_mul', 'scatter_max', 'scatter_min',
           'segment_coo', 'segment_sum_coo', 'segment_add_coo', 'segment_mean_coo', 'segment_max_coo',
           'segment_min_coo', 'segment_csr', 'segment_sum_csr', 'segment_add_csr', 'segment_mean_csr',
           'segment_max_csr', 'segment_min_csr', 'gather_coo', 'gather_csr', 'scatter_softmax',
           'scatter_log_softmax', 'scatter_logsumexp', 'scatter_std']
