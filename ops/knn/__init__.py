"""knn: the k nearest supports of every query within its own sample, for any dimension D >= 1.

CPU: one KD-tree per sample with exact pruning; CUDA: one thread per query scanning its sample.
Memory is O(N*k) (plus O(Ns) for the trees), never O(Nq*Ns).
"""
import torch

from .. import _checks
from ..build import register_autograd


_OP = 'knn'


@_checks.register_fake('fsdlite::knn')
def _knn_fake(query, support, k, query_batch=None, support_batch=None):
    shape = (query.shape[0], k)
    return query.new_empty(shape, dtype=torch.long), query.new_empty(shape)


def _setup_context(ctx, inputs, output):
    query, support = inputs[0], inputs[1]
    index, _ = output
    ctx.save_for_backward(query, support, index)
    ctx.mark_non_differentiable(index)


def _backward(ctx, _grad_index, grad_sqdist):
    query, support, index = ctx.saved_tensors
    valid = index < support.shape[0]
    rows = torch.where(valid, index, torch.zeros_like(index))
    diff = query[:, None, :] - support[rows]  # (Nq, k, D): d sqdist / d query = 2 (q - s)
    grad = (2 * torch.where(valid, grad_sqdist, torch.zeros_like(grad_sqdist)))[..., None] * diff
    grad_support = torch.zeros_like(support).index_add_(0, rows.flatten(), -grad.flatten(0, 1))
    return grad.sum(1), grad_support, None, None, None


register_autograd('fsdlite::knn', _backward, setup_context=_setup_context)


def knn(query, support, k, query_batch=None, support_batch=None):
    """The ``k`` nearest supports of every query, within the query's own sample.

    Args:
        query (Tensor): (Nq, D) float32/float64 finite coordinates, any D >= 1.
        support (Tensor): (Ns, D) same dtype and device as ``query``.
        k (int): neighbours per query, >= 1 (may exceed the candidates of a sample).
        query_batch (Tensor, optional): (Nq,) int64 sample id of each query, sorted non-decreasing.
        support_batch (Tensor, optional): (Ns,) int64 sample id of each support, sorted
            non-decreasing; give both batch tensors or neither (then everything is one sample).
    Returns:
        tuple: ``index`` (Nq, k) int64 support rows and ``sqdist`` (Nq, k) squared Euclidean
        distances, ascending per row, ties broken by the lower support index. Rows whose sample
        has fewer than k supports are padded with index ``Ns`` and distance ``+inf``.

    Gradients: ``index`` is discrete and not differentiable. ``sqdist`` carries the gradient of
    the squared distances w.r.t. ``query`` and ``support`` with the selected neighbours held fixed
    (zero for padded slots). Models usually call knn under ``torch.no_grad()`` and recompute the
    distances (or any edge feature) from ``index`` with autograd.
    """
    _checks.point_sets(_OP, query, support, query_batch, support_batch)
    k = _checks.positive_int(_OP, 'k', k)
    _checks.output_memory(_OP, 'k', k, query.shape[0], 'the queries, query.shape[0]', 8 + query.element_size(),
                          query.device)  # int64 index + distance
    return torch.ops.fsdlite.knn(query, support, k, query_batch, support_batch)


__all__ = ['knn']
