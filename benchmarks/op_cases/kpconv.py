"""Op cases for benchmarks/ops.py: fused kpconv / kp_aggregate vs their pure-torch references.

Forward + backward on radius neighbourhoods of uniform points (``kpconv_memory.make_problem``);
peak memory per variant in a fresh subprocess.  The layer-level comparison (KPConv / KPInv /
KPConvX modules) is ``benchmarks/kpconv_memory.py``.
"""
import torch

from kpconv_memory import make_problem
from op_cases._scaffold import case

KERNEL_SIZE = 15


def make_inputs(n, channels, kind):
    """Arguments of one op call (features and weights require grad)."""
    problem = make_problem(n, 30)
    g = torch.Generator().manual_seed(0)
    r = problem['radius']
    args = dict(q_pts=problem['points'], s_pts=problem['points'], neighbors=problem['neighbors'],
                features=torch.randn(n, channels, generator=g).requires_grad_(True),
                kernel_points=0.66 * r * torch.nn.functional.normalize(torch.randn(KERNEL_SIZE, 3, generator=g)))
    if kind == 'kpconv':
        args.update(weights=(0.05 * torch.randn(KERNEL_SIZE, channels, channels, generator=g)).requires_grad_(True),
                    sigma=0.48 * r, influence='linear', aggregation='sum')
    else:
        args.update(depthwise=torch.randn(KERNEL_SIZE, channels, generator=g).requires_grad_(True),
                    gen_weights=torch.rand(n, KERNEL_SIZE, channels // 8, generator=g).requires_grad_(True),
                    sigma=r, influence='linear', aggregation='nearest')
    return args


def make_work(kind, variant, n, channels):
    """Forward + backward of one variant ('fused' or 'reference')."""
    from fsdlite import ops
    from fsdlite.ops.kp_aggregate.reference import kp_aggregate_reference
    from fsdlite.ops.kpconv.reference import kpconv_reference
    fns = dict(kpconv=dict(fused=ops.kpconv, reference=kpconv_reference),
               kp_aggregate=dict(fused=ops.kp_aggregate, reference=kp_aggregate_reference))
    fn, args = fns[kind][variant], make_inputs(n, channels, kind)

    def work():
        fn(**args).square().mean().backward()

    return work


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): ``kpconv`` and ``kp_aggregate``, N = 50k, C = 64 and 128;
    ``quick``: N = 5k, C = 32."""
    n = 5_000 if quick else 50_000
    return [case(kind, f'N={n} H=30 K={KERNEL_SIZE} C={channels}', make_work, ('reference', 'fused'), 'reference',
                 kind=kind, n=n, channels=channels)
            for kind in ('kpconv', 'kp_aggregate') for channels in ((32,) if quick else (64, 128))]
