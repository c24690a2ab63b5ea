"""Peak memory and time of forward+backward: KPConv, KPInv, KPConvX layers, naive vs fused.

Every variant runs alone in a fresh subprocess (:func:`_harness.run_isolated`): build the layer
and its inputs, then one forward + backward of ``mean(y^2)`` (gradients to the features and all
parameters) is measured.  Problem: N points uniform in a unit cube, stored in Morton order as the
KPDataPreprocessor stores every level (``--order random`` for the cache-hostile worst case), radius
neighbourhoods from ``fsdlite.ops.radius_neighbors`` truncated to H, K = 15 kernel points, C -> C.
KPConv uses KPConv-PyTorch's rigid setting (linear influence, sigma = 0.48 r, sum over kernel
points); KPInv / KPConvX use KPConvX's (nearest kernel point, linear influence, sigma = r) and the
layers' defaults (KPInv: 16 channels per generated weight, GroupNorm + sigmoid; KPConvX: 8).

    python benchmarks/kpconv_memory.py [--quick] [--threads N] [--channels 64 128]

Targets (issue 6): fused peak <= naive peak / 5; fused not slower than naive; fused KPInv faster
than fused KPConv at the same width.  The last line holds the ratios.
"""
import argparse
import math
import os
import subprocess
import tempfile
from pathlib import Path

import torch

import _harness as h

LAYERS = ('KPConv', 'KPInv', 'KPConvX')
IMPLS = ('naive', 'fused')
KERNEL_SIZE = 15


def make_problem(n=100_000, max_neighbors=30, density=40.0, seed=0, order='morton'):
    """Points (n, 3), neighbours (n, H) and the radius giving ``density`` points per ball on average.

    Cached in the temp folder (the same file serves every subprocess of a run).
    """
    path = Path(tempfile.gettempdir()) / f'fsdlite_kp_problem_{n}_{max_neighbors}_{density:g}_{seed}_{order}.pt'
    if path.is_file():
        return torch.load(path)
    from fsdlite.ops import radius_neighbors
    gen = torch.Generator().manual_seed(seed)
    points = torch.rand(n, 3, generator=gen)
    radius = (density * 3 / (4 * math.pi * n)) ** (1 / 3)
    if order == 'morton':
        from fsdlite.models.kpconv.spatial_order import spatial_order
        points = points[spatial_order(points, radius / 2.5)].contiguous()
    neighbors, counts = radius_neighbors(points, points, radius, max_neighbors, return_counts=True)
    problem = dict(points=points, neighbors=neighbors, radius=radius,
                   mean_count=float(counts.float().mean()), truncated=float((counts > max_neighbors).float().mean()))
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as f:
        torch.save(problem, f)
    os.replace(f.name, path)
    return problem


def build_layer(layer, channels, radius, impl):
    """The benchmarked C -> C layer."""
    from fsdlite.models.kpconv.depthwise_layers import KPConvX, KPInv
    from fsdlite.models.kpconv.kpconv_layer import KPConv
    if layer == 'KPConv':
        return KPConv(channels, channels, KERNEL_SIZE, radius, 0.48 * radius, 'linear', 'sum', impl=impl)
    cls = dict(KPInv=KPInv, KPConvX=KPConvX)[layer]
    return cls(channels, kernel_size=KERNEL_SIZE, radius=radius, sigma=radius, influence='linear',
               aggregation='nearest', impl=impl)


def make_work(layer, channels, impl, n, max_neighbors, order='morton'):
    """Set up one variant; returns the measured callable (one forward + backward)."""
    problem = make_problem(n, max_neighbors, order=order)
    torch.manual_seed(0)
    module = build_layer(layer, channels, problem['radius'], impl)
    points, neighbors = problem['points'], problem['neighbors']
    x = torch.randn(n, channels, requires_grad=True)
    from fsdlite import ops
    ops.kpconv, ops.kp_aggregate  # noqa: B018 - load the op libraries before the measurement

    def work():
        y = module(points, points, neighbors, x)
        y.square().mean().backward()
        x.grad = None
        module.zero_grad(set_to_none=True)

    return work


def machine_state():
    """``uptime`` and ``free -g`` lines, printed so a busy machine is visible in the log."""
    lines = []
    for cmd in (['uptime'], ['free', '-g']):
        try:
            lines.append(subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return '\n'.join(lines)


def main(argv=None):
    """Command line (see the module docstring): run every (layer, C, impl) in a fresh process, print the tables,
    ratios and the ``RESULT`` line."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='N = 20k (smoke run)')
    parser.add_argument('--n', type=int, default=None, help='number of points (default 100k, quick 20k)')
    parser.add_argument('--neighbors', type=int, default=30, help='H')
    parser.add_argument('--channels', type=int, nargs='+', default=[64, 128])
    parser.add_argument('--threads', type=int, default=torch.get_num_threads())
    parser.add_argument('--order', choices=('morton', 'random'), default='morton',
                        help='storage order of the points')
    args = parser.parse_args(argv)
    n = args.n or (20_000 if args.quick else 100_000)
    print(machine_state())
    problem = make_problem(n, args.neighbors, order=args.order)
    print(f'{args.order} point order; torch {torch.__version__}, {args.threads} threads; N={n}, H={args.neighbors}, '
          f'K={KERNEL_SIZE}, radius {problem["radius"]:.4f}, mean neighbours {problem["mean_count"]:.1f} '
          f'({100 * problem["truncated"]:.0f}% truncated to H)')
    script = Path(__file__).resolve()
    results, rows = {}, []
    for channels in args.channels:
        for layer in LAYERS:
            for impl in IMPLS:
                res = h.run_isolated(script, 'make_work', dict(layer=layer, channels=channels, impl=impl, n=n,
                                                               max_neighbors=args.neighbors, order=args.order),
                                     threads=args.threads)
                results[(layer, channels, impl)] = res
                rows.append([layer, channels, impl, f'{res["seconds"]:.2f}', h.fmt_bytes(res['peak_bytes']),
                             '' if res['ok'] else res['error'][-120:]])
                print(f'  {layer:8s} C={channels:<4d} {impl:6s} {res["seconds"]:7.2f} s  '
                      f'{h.fmt_bytes(res["peak_bytes"]):>10s}', flush=True)
    h.print_table(['layer', 'C', 'impl', 'fwd+bwd s', 'peak memory', 'error'], rows)
    payload, ratio_rows = {}, []
    for channels in args.channels:
        for layer in LAYERS:
            naive, fused = results[(layer, channels, 'naive')], results[(layer, channels, 'fused')]
            mem = naive['peak_bytes'] / max(fused['peak_bytes'], 1)
            speed = naive['seconds'] / fused['seconds']
            payload[f'{layer}_C{channels}'] = dict(memory_naive_over_fused=round(mem, 2),
                                                   time_naive_over_fused=round(speed, 2))
            ratio_rows.append([layer, channels, f'{mem:.1f}x', f'{speed:.2f}x'])
        inv_speed = results[('KPConv', channels, 'fused')]['seconds'] / results[('KPInv', channels, 'fused')]['seconds']
        payload[f'KPInv_over_KPConv_fused_speed_C{channels}'] = round(inv_speed, 2)
        ratio_rows.append(['KPInv vs KPConv (fused)', channels, '', f'{inv_speed:.2f}x'])
    print()
    h.print_table(['variant', 'C', 'naive/fused peak', 'naive/fused time'], ratio_rows)
    payload['targets_met'] = dict(
        memory_5x=all(v['memory_naive_over_fused'] >= 5 for k, v in payload.items() if isinstance(v, dict)),
        fused_not_slower=all(v['time_naive_over_fused'] >= 1 for k, v in payload.items() if isinstance(v, dict)),
        kpinv_faster_than_kpconv=all(v > 1 for k, v in payload.items() if k.startswith('KPInv_over')))
    payload.update(n=n, neighbors=args.neighbors, kernel_size=KERNEL_SIZE, threads=args.threads, order=args.order)
    h.print_result(payload)


if __name__ == '__main__':
    main()
