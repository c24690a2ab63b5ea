"""The two implementations every VoxelNet component provides, with the same parameters.

* ``'dense'``: the faithful O(nodes²) formulation (pairwise latent distances, explicit attention
  matrix); it is the reference.
* ``'efficient'``: kNN indices (no gradient) and the k squared distances from :func:`fsdlite.ops.knn`
  (its backward recomputes s_i - s_j for the fixed neighbours), :func:`fsdlite.ops.knn_aggregate`,
  SDPA attention without an N x N matrix, chunks with recomputation.
"""
IMPLS = ('dense', 'efficient')


def check_impl(owner, impl):
    """Return ``impl`` if it is one of :data:`IMPLS`, else raise a ValueError naming ``owner``."""
    if impl not in IMPLS:
        raise ValueError(f'{owner}: impl must be one of {list(IMPLS)}, got {impl!r}')
    return impl
