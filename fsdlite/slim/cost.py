"""Cost of a model on a sample: parameters, multiply-accumulates, CPU latency.

FLOPs are counted as multiply-accumulates (1 MAC = 1 FLOP, fvcore/mmengine's convention) of the ops
that run on the sample, with a ``TorchDispatchMode``:

* dense products (``mm``/``addmm``/``bmm``/``baddbmm``/``mv``/``dot``, convolutions, SDPA) from their shapes;
* fsdlite's kernel-point and neighbour ops from the real neighbourhoods (valid neighbour slots only);
* sparse convolutions from their real kernel maps: fsdlite's fused kernel from its (input, output) pairs, times
  Cin x Cout; spconv's own layers from the pairs per kernel offset its ``indice_pair_num`` holds (submanifold
  offsets mirrored as spconv does) -- the same count; spconv's kernels run on fsdlite's maps are counted by
  their matrix products. mmengine's counter gives 0 for SubMConv3d and crashes on strided sparse convs.

Element-wise ops, norms, reductions, index ops and neighbour searches are not counted; the custom ops that
ran without a counting rule are listed in ``uncounted``.
"""
import math
import statistics
import time
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..utils.compat import import_spconv
from .rules import bind, flat_outputs


def _mm(b, out):
    a = b.get('mat1', b.get('batch1', b.get('self')))
    m = b.get('mat2', b.get('batch2'))
    return a.numel() * m.shape[-1]


def _mv(b, out):
    mat = b.get('mat', b.get('self'))
    return mat.numel()


def _dot(b, out):
    return b['self'].numel()


def _conv(b, out):
    w = b['weight']
    o = flat_outputs(out)[0]
    return o.numel() * w[0].numel()


def _sdpa(b, out):
    q, k, v = b['query'], b['key'], b['value']
    return q.numel() // q.shape[-1] * k.shape[-2] * (q.shape[-1] + v.shape[-1])


def _valid_pairs(neighbors, num_support):
    return int((neighbors < num_support).sum())


def _kpconv(b, out):
    x, w, nb = b['features'], b['weights'], b['neighbors']
    k, c1, c2 = w.shape
    pairs = _valid_pairs(nb, x.shape[0])
    gather = pairs * c1 * (k if b['aggregation'] == 'sum' else 1)
    return gather + nb.shape[0] * k * c1 * c2


def _sparse_conv(b, out):
    weight = b['weight']
    return b['pairs'].shape[1] * weight.shape[1] * weight.shape[2]


def _kp_aggregate(b, out):
    x, nb, kp = b['features'], b['neighbors'], b['kernel_points']
    k, c = kp.shape[-2], x.shape[1]
    pairs = _valid_pairs(nb, x.shape[0])
    return pairs * c * (k if b['aggregation'] == 'sum' else 1) + nb.shape[0] * k * c


def _neighbor_aggregate(b, out):
    x, nb = b['features'], b['neighbors']
    return _valid_pairs(nb, x.shape[0]) * x.shape[1]


def _knn_aggregate(b, out):
    return b['index'].numel() * b['features'].shape[1]


def _normalization(b, out):
    return 0  # like aten's layer_norm: elementwise work, no multiply-accumulates counted


MAC_RULES = {
    'aten::mm': _mm, 'aten::addmm': _mm, 'aten::bmm': _mm, 'aten::baddbmm': _mm, 'aten::mv': _mv,
    'aten::addmv': _mv, 'aten::dot': _dot, 'aten::convolution': _conv, 'aten::_convolution': _conv,
    'aten::_scaled_dot_product_flash_attention_for_cpu': _sdpa, 'aten::_scaled_dot_product_attention_math': _sdpa,
    'aten::_scaled_dot_product_efficient_attention': _sdpa, 'aten::_scaled_dot_product_flash_attention': _sdpa,
    'fsdlite::kpconv': _kpconv, 'fsdlite::kp_aggregate': _kp_aggregate, 'fsdlite::sparse_conv': _sparse_conv,
    'fsdlite::neighbor_aggregate': _neighbor_aggregate, 'fsdlite::knn_aggregate': _knn_aggregate,
    'fsdlite::layer_norm_rows': _normalization,
}


def sparse_conv_pairs(module, inputs, output):
    """Number of (input, output) voxel pairs per kernel offset that spconv multiplies, as a list.

    Read from the rulebook spconv stored under the layer's ``indice_key`` (recomputed with spconv's own
    ``get_indice_pairs`` when the layer has no key). Submanifold layers run the centre offset on every voxel
    and mirror the offsets after it, as spconv's CPU path does.
    """
    spconv = import_spconv()
    feats_in = inputs[0]
    if getattr(module, 'conv1x1', False):
        return [int(feats_in.features.shape[0])]
    data = output.indice_dict.get(module.indice_key) if module.indice_key is not None else None
    if data is None:
        _, _, num = spconv.ops.get_indice_pairs(
            feats_in.indices, feats_in.batch_size, feats_in.spatial_shape, module.algo, module.kernel_size,
            module.stride, module.padding, module.dilation, module.output_padding, module.subm, module.transposed)
    elif hasattr(data, 'indice_pair_num'):
        num = data.indice_pair_num
    else:  # implicit-GEMM rulebook (GPU): valid entries of the forward pair table
        return (data.pair_fwd >= 0).sum(dim=1).tolist()
    counts = [int(n) for n in num.reshape(-1).tolist()]
    if module.subm:
        kv, centre = len(counts), len(counts) // 2
        counts = [int(feats_in.features.shape[0]) if i == centre else counts[i if i < centre else kv - 1 - i]
                  for i in range(kv)]
    return counts


def _is_sparse_conv(module):
    return any(c.__name__ == 'SparseConvolution' and c.__module__.startswith('spconv') for c in type(module).__mro__)


class MacCounter(TorchDispatchMode):
    """Counts multiply-accumulates of one forward (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self.macs = Counter()
        self.uncounted = Counter()
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.paused:
            name = func._schema.name
            rule = MAC_RULES.get(name)
            if rule is not None:
                self.macs[name] += int(rule(bind(func, args, kwargs), out))
            elif not name.startswith('aten::'):
                self.uncounted[name] += 1
        return out

    def attach(self, model):
        """Hooks that count spconv layers from their rulebooks (the dispatch count pauses inside them)."""
        handles = []
        for module in model.modules():
            if not _is_sparse_conv(module):
                continue

            def pre(mod, args):
                self.paused += 1

            def post(mod, args, output):
                self.paused -= 1
                pairs = sum(sparse_conv_pairs(mod, args, output))
                self.macs['spconv (rulebook)'] += pairs * int(mod.in_channels) * int(mod.out_channels)

            handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
        return handles


def count_macs(model, data, mode='predict'):
    """``(total MACs, per-op Counter, uncounted custom ops Counter)`` of ``model(**data, mode=mode)``
    (eval mode, no grad), on the model's dynamic path: the real work, not the padding of a fixed-shape run."""
    counter = MacCounter()
    handles = counter.attach(model)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), counter:
            model(**data, mode=mode)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return sum(counter.macs.values()), counter.macs, counter.uncounted


def count_params(model):
    """Number of parameters."""
    return sum(p.numel() for p in model.parameters())


def measure_latency(model, data, mode='predict', repeat=5, warmup=1):
    """Median CPU seconds of ``model(**data, mode=mode)`` over ``repeat`` runs, in eval and inference mode.

    ``torch.inference_mode`` is how a model is run for inference: against ``no_grad`` it skips the autograd and
    version-counter bookkeeping of every op (a visible share of a small model's CPU forward).
    """
    model.eval()
    times = []
    with torch.inference_mode():
        for i in range(warmup + repeat):
            start = time.perf_counter()
            model(**data, mode=mode)
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return statistics.median(times) if times else math.nan


__all__ = ['count_macs', 'count_params', 'measure_latency', 'sparse_conv_pairs', 'MAC_RULES', 'MacCounter']
