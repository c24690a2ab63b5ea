"""Sparse conv on CPU: spconv vs the rulebook conv (PyTorch, two modes) vs ONNX Runtime, side by side.

Each configuration is one layer on real voxels (the V voxels nearest to the sensor of the Waymo-range frame in
../shared/data/spconv_waymo, grid 80 x 1600 x 1600; synthetic when absent) with Cin = Cout = C:

* ``spconv``        -- spconv ``SubMConv3d`` / ``SparseConv3d`` forward (Native CPU; indice pairs + conv);
* ``rulebook op``   -- building the neighbour map with ``fsdlite.ops`` (what runs before the graph);
* ``torch matmul``  -- ``sparse_conv`` on a dense kernel map as one (V, K*C) @ (K*C, C) product (conv only);
* ``torch loop``    -- the same as K gathered products (conv only);
* ``ort matmul`` / ``ort loop`` -- the same graphs exported to ONNX (opset 18), run in ONNX Runtime.

Ratios are spconv time / variant time (> 1: faster than spconv; spconv's time includes its pair building, so
compare it with ``rulebook op`` + a conv variant). Peak memory of each variant of the largest configuration is
measured in a fresh subprocess.

    python benchmarks/rulebook_conv.py [--quick] [--threads N] [--repeat R] [--no-memory]
"""
import argparse
import tempfile
from pathlib import Path

import torch

import _harness as h
from op_cases.rulebook import voxel_set
from fsdlite.deploy.translations import custom_translations
from fsdlite.models.layers.sparse_conv import KernelMap, RulebookSparseConv3d

VARIANTS = ('spconv', 'rulebook op', 'torch matmul', 'torch loop', 'ort matmul', 'ort loop')
GEOMETRY = {'subm': dict(kernel_size=3, subm=True), 'conv': dict(kernel_size=3, stride=2, padding=1)}


def _layer_inputs(kind, num_voxels, channels, seed=0):
    from fsdlite.models.layers.rulebook_conv import build_rulebook
    coors, shape = voxel_set(num_voxels)
    n = coors.shape[0]
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(n, channels, generator=g)
    layer = RulebookSparseConv3d(channels, channels, bias=True, indice_key='k', **GEOMETRY[kind]).eval()
    rulebook = build_rulebook(layer, coors, n, shape, max_out=n)
    return layer, coors, shape, feats, rulebook


def _onnx_session(layer, feats, nbr, mode, threads):
    import onnxruntime as ort

    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x, n):
            return self.layer(x, KernelMap.dense(n, x.shape[0]), mode=mode)

    path = Path(tempfile.mkdtemp(prefix='fsdlite-bench-')) / f'conv_{mode}.onnx'
    with torch.no_grad():
        torch.onnx.export(Conv().eval(), (feats, nbr), str(path), dynamo=True, opset_version=18, external_data=False,
                          custom_translation_table=custom_translations(), verbose=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
    names = [i.name for i in session.get_inputs()]
    return lambda: session.run(None, dict(zip(names, [feats.numpy(), nbr.numpy()])))


def work(variant, kind, num_voxels, channels, threads=None):
    """Zero-arg callable running one layer with ``variant`` (see the module docstring)."""
    threads = threads or torch.get_num_threads()
    layer, coors, shape, feats, rulebook = _layer_inputs(kind, num_voxels, channels)
    if variant == 'spconv':
        from fsdlite.utils import compat
        spconv = compat.import_spconv()
        cls = spconv.SubMConv3d if kind == 'subm' else spconv.SparseConv3d
        kwargs = {k: v for k, v in GEOMETRY[kind].items() if k != 'subm'}
        sp_layer = cls(channels, channels, bias=True, **kwargs)  # train mode: spconv's eval-mode bias is CUDA-only
        sp_layer.load_state_dict(layer.state_dict(), strict=True)
        c32 = coors.int().contiguous()

        def run():
            with torch.no_grad():
                return sp_layer(spconv.SparseConvTensor(feats, c32, list(shape), 1)).features
        return run
    if variant == 'rulebook op':
        from fsdlite.models.layers.rulebook_conv import build_rulebook
        return lambda: build_rulebook(layer, coors, coors.shape[0], shape, max_out=coors.shape[0])
    mode = variant.split()[1]
    if variant.startswith('ort'):
        return _onnx_session(layer, feats, rulebook.nbr, mode, threads)

    def run():
        with torch.no_grad():
            return layer(feats, KernelMap.dense(rulebook.nbr, feats.shape[0]), mode=mode)
    return run


def check_agreement(kind, num_voxels, channels):
    """Max |rulebook conv - spconv| over the output voxels (rows matched by coordinates)."""
    from fsdlite.utils import compat
    spconv = compat.import_spconv()
    layer, coors, shape, feats, rulebook = _layer_inputs(kind, num_voxels, channels)
    cls = spconv.SubMConv3d if kind == 'subm' else spconv.SparseConv3d
    sp_layer = cls(channels, channels, bias=True, **{k: v for k, v in GEOMETRY[kind].items() if k != 'subm'})
    sp_layer.load_state_dict(layer.state_dict(), strict=True)
    with torch.no_grad():
        out = sp_layer(spconv.SparseConvTensor(feats, coors.int().contiguous(), list(shape), 1))
        ours = layer(feats, KernelMap.dense(rulebook.nbr, feats.shape[0]))
    m = int(rulebook.num_valid_out)
    key = lambda c: ((c[:, 0] * 4096 + c[:, 1]) * 4096 + c[:, 2]) * 4096 + c[:, 3]  # noqa: E731
    theirs = out.features[torch.argsort(key(out.indices.long()))]
    return float((ours[:m][torch.argsort(key(rulebook.out_coors[:m]))] - theirs).abs().max())


def main(argv=None):
    """Command line (see the module docstring): check agreement with spconv, time every variant per configuration,
    print the table and the ``RESULT`` line."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='small sizes (smoke run)')
    parser.add_argument('--threads', type=int, default=torch.get_num_threads())
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--no-memory', action='store_true', help='skip the per-variant peak-memory subprocesses')
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    configs = ([('subm', 2_000, 16), ('conv', 2_000, 16)] if args.quick else
               [('subm', 20_000, 32), ('conv', 20_000, 32), ('subm', 60_000, 64), ('conv', 60_000, 64)])
    print(f'torch {torch.__version__}, {args.threads} threads, {"quick" if args.quick else "full"} sizes')
    rows, result = [], {}
    for index, (kind, num_voxels, channels) in enumerate(configs):
        name = f'{kind} k3{" s2" if kind == "conv" else ""} V={num_voxels} C={channels}'
        error = check_agreement(kind, num_voxels, channels)
        times = {v: h.time_call(work(v, kind, num_voxels, channels, args.threads), repeat=args.repeat)
                 for v in VARIANTS}
        peaks = {}
        if not args.no_memory and index == len(configs) - 1:
            for v in VARIANTS:
                peaks[v] = h.run_isolated(Path(__file__).resolve(), 'work',
                                          dict(variant=v, kind=kind, num_voxels=num_voxels, channels=channels,
                                               threads=args.threads), threads=args.threads)['peak_bytes']
        for v, t in times.items():
            ratio = times['spconv'] / t
            rows.append([name, v, f'{t * 1e3:.1f}', '—' if v == 'spconv' else f'{ratio:.2f}x',
                         h.fmt_bytes(peaks[v]) if v in peaks else '', f'{error:.1e}' if v == 'spconv' else ''])
            result[f'{name}|{v}'] = {'ms': round(t * 1e3, 2), 'vs_spconv': round(ratio, 3),
                                     **({'peak_bytes': peaks[v]} if v in peaks else {})}
        result[f'{name}|max_abs_diff_vs_spconv'] = error
    h.print_table(['layer', 'variant', 'ms', 'vs spconv', 'peak mem', 'max |diff|'], rows)
    h.print_result(result)


if __name__ == '__main__':
    main()
