"""VoxelNet forward + backward: peak memory and time of impl='dense' vs impl='efficient' (same weights).

Each (impl, V, M) runs alone in a fresh subprocess (``_harness.run_isolated``): peak RSS growth during
one forward + backward of the full model (muon stage, voxel stage, head) with gradients w.r.t. the
weights and the (V, M, 9) inputs.  The model is the training config's (widths and k as configured).
Cases whose estimated dense memory exceeds ``--dense-limit-gib`` are skipped (the estimate is printed).

    python benchmarks/voxelnet_memory.py                 # V=125/M=1000 both impls, larger sizes, V=1000/M=10000
    python benchmarks/voxelnet_memory.py --quick         # small sizes (smoke run)

Ends with ``RESULT {json}`` and the line ``dense/efficient peak memory ratio = X; time ratio = Y``
(at the first size both implementations ran).
"""
import argparse
from pathlib import Path

import _harness as h

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / 'configs' / 'voxelnet' / 'voxelnet_random_blocks.py'
FULL_CASES = [(125, 1000, ('dense', 'efficient')), (125, 2000, ('dense', 'efficient')),
              (343, 2000, ('efficient',)), (1000, 10000, ('efficient',))]
QUICK_CASES = [(27, 200, ('dense', 'efficient')), (64, 500, ('efficient',))]
DENSE_BYTES_PER_PAIR = 72   # dense peak bytes per voxel x muon^2 (docs/benchmarks.md: 8.3 GiB at V=125, M=1000)


def work(impl, voxels, muons, chunk_rows=1 << 13, seed=0):
    """Zero-arg callable: one forward + backward of the config's VoxelNet on random (1, V, M, 9) inputs."""
    import torch
    from mmengine.config import Config

    import fsdlite.models  # noqa: F401
    from fsdlite.registry import MODELS
    torch.manual_seed(seed)
    cfg = Config.fromfile(str(CONFIG)).model.to_dict()
    cfg.update(impl=impl, chunk_rows=chunk_rows, recompute=True)
    model = MODELS.build(cfg)
    gen = torch.Generator().manual_seed(seed)
    side = round(voxels ** (1 / 3))
    centres = torch.rand(1, voxels, 3, generator=gen) * side
    feats = torch.rand(1, voxels, muons, 9, generator=gen)
    feats[..., 4] = 10 ** (4 * feats[..., 4] - 2)
    feats.requires_grad_(True)
    # warm up on a tiny volume (loads the op libraries, first-call kernel setup) outside the measurement
    tiny = torch.rand(1, 12, 30, 9, generator=gen) + 0.01
    model({'muon_features': tiny, 'voxel_centres': centres[:, :12]}).sum().backward()
    model.zero_grad(set_to_none=True)

    def run():
        out = model({'muon_features': feats, 'voxel_centres': centres})
        out.sum().backward()
        assert feats.grad is not None and torch.isfinite(feats.grad).all()

    return run


def main(argv=None):
    """Command line (see the module docstring): run every (V, M, impl) case in a fresh process, print the table,
    the ``RESULT`` line and the dense/efficient ratio line."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='small sizes')
    parser.add_argument('--threads', type=int, default=None, help='torch threads in each child (default: torch)')
    parser.add_argument('--dense-limit-gib', type=float, default=12.0, help='skip dense cases estimated above this')
    parser.add_argument('--chunk-rows', type=int, default=1 << 13, help='efficient impl: voxel x muon rows per chunk')
    parser.add_argument('--skip-largest', action='store_true', help='skip the V=1000, M=10000 efficient run')
    args = parser.parse_args(argv)
    cases = QUICK_CASES if args.quick else FULL_CASES
    if args.skip_largest:
        cases = [c for c in cases if c[:2] != (1000, 10000)]
    rows, result, ratio = [], {}, None
    for voxels, muons, impls in cases:
        measured = {}
        for impl in impls:
            estimate = DENSE_BYTES_PER_PAIR * voxels * muons ** 2
            if impl == 'dense' and estimate > args.dense_limit_gib * 2 ** 30:
                rows.append([voxels, muons, impl, 'skipped', f'~{h.fmt_bytes(estimate)} (estimate)', ''])
                continue
            res = h.run_isolated(__file__, 'work', dict(impl=impl, voxels=voxels, muons=muons,
                                                        chunk_rows=args.chunk_rows), timeout=6 * 3600,
                                 threads=args.threads)
            measured[impl] = res
            rows.append([voxels, muons, impl, f'{res["seconds"]:.1f}', h.fmt_bytes(res['peak_bytes']),
                         '' if res['ok'] else res['error'][-200:]])
            result[f'V={voxels}|M={muons}|{impl}'] = dict(seconds=res['seconds'], peak_bytes=res['peak_bytes'],
                                                         ok=res['ok'])
            print(f'  V={voxels} M={muons} {impl}: {res["seconds"]:.1f} s, {h.fmt_bytes(res["peak_bytes"])}'
                  f'{"" if res["ok"] else "  FAILED " + res["error"][-300:]}', flush=True)
        both = all(measured.get(i, {}).get('ok') for i in ('dense', 'efficient'))
        if both and ratio is None:
            d, e = measured['dense'], measured['efficient']
            ratio = (voxels, muons, d['peak_bytes'] / e['peak_bytes'], d['seconds'] / e['seconds'])
    h.print_table(['V', 'M', 'impl', 'fwd+bwd s', 'peak memory', 'note'], rows)
    if ratio:
        result['ratio'] = dict(V=ratio[0], M=ratio[1], memory=ratio[2], time=ratio[3])
    h.print_result(result)
    if ratio:
        print(f'dense/efficient peak memory ratio = {ratio[2]:.1f}; time ratio = {ratio[3]:.2f}'
              f'  (V={ratio[0]}, M={ratio[1]})')
    else:
        print('dense/efficient peak memory ratio = n/a; time ratio = n/a  (no size ran both implementations)')


if __name__ == '__main__':
    main()
