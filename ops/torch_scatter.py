"""A stand-in for the ``torch_scatter`` package (pytorch_scatter 2.1): alias it and ported code runs unchanged::

    import fsdlite.ops.torch_scatter as torch_scatter
    from fsdlite.ops.torch_scatter import scatter, scatter_max, segment_csr

Every public function of torch_scatter is here with its name, signature and semantics -- scatter and
scatter_{sum, add, mean, mul, min, max}; segment_coo / segment_csr and their named variants; gather_coo /
gather_csr; scatter_{softmax, log_softmax, logsumexp, std} -- each scriptable with ``torch.jit.script``.
The behaviour, and the few places where fsdlite deliberately differs (it validates indices, and returns the true
value for a segment holding only -inf or the dtype's lowest value), are documented in :mod:`fsdlite.ops.scatter`.
"""
from .scatter import (gather_coo, gather_csr, scatter, scatter_add, scatter_log_softmax, scatter_logsumexp,
                      scatter_max, scatter_mean, scatter_min, scatter_mul, scatter_softmax, scatter_std, scatter_sum,
                      segment_add_coo, segment_add_csr, segment_coo, segment_csr, segment_max_coo, segment_max_csr,
                      segment_mean_coo, segment_mean_csr, segment_min_coo, segment_min_csr, segment_sum_coo,
                      segment_sum_csr)

__version__ = '2.1.2'  # the torch_scatter release whose API this module mirrors (some ported code checks it)

__all__ = ['scatter', 'scatter_sum', 'scatter_add', 'scatter_mean', 'scatter_mul', 'scatter_max', 'scatter_min',
           'segment_coo', 'segment_sum_coo', 'segment_add_coo', 'segment_mean_coo', 'segment_max_coo',
           'segment_min_coo', 'segment_csr', 'segment_sum_csr', 'segment_add_csr', 'segment_mean_csr',
           'segment_max_csr', 'segment_min_csr', 'gather_coo', 'gather_csr', 'scatter_softmax',
           'scatter_log_softmax', 'scatter_logsumexp', 'scatter_std', '__version__']
