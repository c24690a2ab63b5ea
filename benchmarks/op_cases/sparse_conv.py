"""sparse_conv (C++, fused gather-GEMM-scatter over offset-grouped pairs) vs the pure-torch reference (one gathered
product per offset) and spconv's ``SubMConv3d`` (Native CPU, its own per-offset gather/GEMM/scatter), on the same
submanifold 3x3x3 rulebook.

Voxels: the ``V`` voxels nearest to the sensor of the Waymo-range frame in ../shared/data/spconv_waymo (synthetic
when absent), Cin = Cout = C. Every variant is timed on the convolution only: the pairs are built beforehand
(spconv's are cached on its input tensor by ``indice_key`` after a first call, as inside a network). Peak memory
per variant in a fresh subprocess. The ``fwd+bwd`` cases time a training step of the layer: the forward and the
backward to the features and the weight (``sparse_conv``'s backward runs the transposed convolution and the
``sparse_conv_weight_grad`` kernel; spconv its per-offset backward; the reference autograd through its products).
"""
import torch

from op_cases._scaffold import case
from op_cases.rulebook import voxel_set


def work(variant, num_voxels, channels, backward=False):
    """Zero-arg callable of one submanifold conv with ``variant`` ('fsdlite', 'reference', 'spconv'); with
    ``backward``, the forward and the backward to the features and the weight."""
    from fsdlite.models.layers.rulebook_conv import kernel_matrices
    from fsdlite.ops import pairs_by_offset, rulebook_subm, sparse_conv
    from fsdlite.ops.sparse_conv.reference import sparse_conv_reference
    coors, shape = voxel_set(num_voxels)
    n = coors.shape[0]
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(n, channels, generator=g).requires_grad_(backward)
    weight = torch.randn(channels, 3, 3, 3, channels, generator=g) / (27 * channels) ** 0.5
    grad_out = torch.randn(n, channels, generator=g)

    def step(forward):
        if not backward:
            with torch.no_grad():
                return forward()
        feats.grad = None
        forward().backward(grad_out)
        return feats.grad

    if variant == 'spconv':
        from fsdlite.utils import compat
        spconv = compat.import_spconv()
        layer = spconv.SubMConv3d(channels, channels, 3, bias=False, indice_key='subm').train(backward)
        with torch.no_grad():
            layer.weight.copy_(weight)
        tensor = spconv.SparseConvTensor(feats, coors.int(), list(shape), 1)
        with torch.no_grad():
            layer(tensor)  # builds and caches the rulebook under 'subm'
        return lambda: step(lambda: layer(tensor).features)
    kmap = pairs_by_offset(rulebook_subm(coors, n, shape, 3), n)
    matrices = kernel_matrices(weight).contiguous().requires_grad_(backward)
    conv = sparse_conv if variant == 'fsdlite' else sparse_conv_reference
    return lambda: step(lambda: conv(feats, matrices, kmap.pairs, kmap.offset_starts, n))


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): a k3 submanifold conv on 20k voxels (``quick``: 5k) at
    C = 8, 32 and 64, forward and forward + backward (peak memory of the widest)."""
    num_voxels = 5_000 if quick else 20_000
    return [case('sparse_conv', f'V={num_voxels} subm k3 C={c}{" fwd+bwd" if backward else ""}', work,
                 ('reference', 'spconv', 'fsdlite'), 'reference', measure_memory=c == 64, num_voxels=num_voxels,
                 channels=c, backward=backward) for backward in (False, True) for c in (8, 32, 64)]
