"""Deployed latency on CPU: PyTorch eager (dynamic shapes) vs PyTorch static (fixed shapes) vs ONNX Runtime.

For every family one model at its configured widths (trained weights with ``--checkpoint``, else random weights,
seed 0) is exported with ``fsdlite.deploy.export_model`` and timed end to end on the same input, batch 1:

* ``eager``  -- the original model's dynamic PyTorch inference as users run it (preprocessing, the default kernels:
  for the detectors' SparseUNet on the CPU the fused ``fsdlite.ops.sparse_conv``, NMS);
* ``eager spconv`` -- the same with the SparseUNet on spconv (the detectors' reference; the others: = eager);
* ``static`` -- the deploy pipeline with the graph run in PyTorch: pre-ops -> fixed-shape graph module -> post-ops;
* ``ORT full`` -- the deploy pipeline on ``model.onnx`` (the full bounds): pre-ops -> ONNX Runtime -> post-ops;
* ``ORT``    -- the deploy pipeline as shipped (``DeployedModel``), with the stage split of its median run: the
  detectors are exported with capacity tiers (``--tiers``, fsdlite.deploy.tiers) and the input runs on the smallest
  tier graph it fits (the ``tier`` column; 1 = model.onnx).

A detector whose config has a box refiner (``BoxRefiner``, its second stage) is also timed without it (same
bounds; ``--no-refiner-rows`` leaves these rows out). The detectors are also timed slimmed (``--slim-width``,
default 0.5): ``fsdlite.slim`` cuts the model's channels (same bounds, same frame) and the slim config + weights go
through the same export.

Inputs: FSD-lite / FSDv2-lite on the KITTI 000008 frame (the KITTI static configs' bounds), VoxelNet on a
simulated volume of its config, KPFCNN on a synthetic scene of its config.  The target is ONNX Runtime not
slower than eager (``eager / ort >= 1``, ORT as shipped). The PyTorch variants and the
pre-/post-ops run in ``torch.inference_mode``.  ``--margin M`` replaces the configured bounds by the
input's own needs times M (the padding overhead of the fixed shapes at its smallest).

    python benchmarks/deploy_latency.py [--quick] [--threads N] [--repeat R] [--margin M] [--only fsd voxelnet ...]
                                        [--slim-width W | --slim-width 0 (no slim rows)] [--tiers S ... | --tiers]
                                        [--no-refiner-rows]
"""
import argparse
import tempfile
import time
from pathlib import Path

import torch
from mmengine.config import Config

import _harness as h

from fsdlite.deploy import DeployedModel, export_model, prepare
from fsdlite.deploy.adapter import DeployAdapter, Frame
from fsdlite.deploy.exporter import build_model
from fsdlite.deploy.frames import LIDAR_FRAMES, load_lidar_frame
from fsdlite.engine.tool_setup import number
from fsdlite.slim.api import slim_config
from fsdlite.slim.engine import SlimRequest

CASES = {
    'FSD-lite': dict(key='fsd', config='configs/fsd/fsdlite_kitti_static.py', frame='kitti'),
    'FSDv2-lite': dict(key='fsdv2', config='configs/fsdv2/fsdv2lite_kitti_static.py', frame='kitti'),
    'VoxelNet': dict(key='voxelnet', config='configs/voxelnet/voxelnet_random_blocks.py', frame=None),
    'KPFCNN': dict(key='kpfcnn', config='configs/kpconv/kpfcnn_kpconv_scenes.py', frame=None),
}


def slim_case(case, width, work_dir):
    """A copy of a detector ``case`` whose config and weights are the width-``width`` slimming of its model (its
    ``checkpoint``, else random weights; ``fsdlite.slim``: importance-ranked channels, coupled layers cut alike;
    bounds unchanged)."""
    out = Path(work_dir) / f'{case["key"]}_slim'
    out.mkdir(parents=True, exist_ok=True)
    source = out / 'source.pth'  # the weights export_model(..., checkpoint) uses ('random': seed 0)
    model = build_model(Config.fromfile(case['config']).model, case.get('checkpoint', 'random'))
    torch.save(dict(state_dict=model.state_dict(), meta={}), source)
    slim = slim_config(case['config'], str(source), SlimRequest(width=width), str(out))
    return dict(case, key=f'{case["key"]}_w{width:g}', config=slim.config_path, checkpoint=slim.checkpoint_path)


#: capacity tiers of the detector exports (fractions of the pre-op bounds)
DEFAULT_TIERS = (0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.85)


def without_refiner_case(case, work_dir):
    """A copy of a detector ``case`` without its second stage (``model.refiner=None``; the rest, the bounds but the
    refiner's and the other weights of its ``checkpoint`` unchanged), so the refiner's cost shows beside it; None
    when the case has no refiner."""
    cfg = Config.fromfile(case['config'])
    if cfg.model.get('refiner') is None:
        return None
    cfg.model.refiner = None
    if cfg.model.get('bounds') is not None:
        cfg.model.bounds.pop('max_refiner_pairs', None)
    out = Path(work_dir) / f'{case["key"]}_no_refiner'
    out.mkdir(parents=True, exist_ok=True)
    cfg.dump(out / 'config.py')
    plain = dict(case, key=f'{case["key"]}_no_refiner', config=str(out / 'config.py'))
    if case.get('checkpoint', 'random') != 'random':
        state = torch.load(case['checkpoint'], map_location='cpu', weights_only=False)
        state = state.get('state_dict', state)
        torch.save(dict(state_dict={k: v for k, v in state.items() if not k.startswith('refiner.')}, meta={}),
                   out / 'weights.pth')
        plain['checkpoint'] = str(out / 'weights.pth')
    return plain


def export_case(case, checkpoint, work_dir, threads, tiers, margin=None):
    """Export one case (its frame, ``checkpoint`` or 'random'; a detector with capacity ``tiers``) into
    ``work_dir/<key>`` and load the deploy folder with ``threads`` intra-op threads.

    ``margin``: bounds measured on the input times ``margin`` instead of the configured / default ones.
    Returns:
        tuple: the adapter (bounds as exported, host state loaded), the frames, the ``ExportResult`` and the
        ``DeployedModel``.
    """
    frames = None
    if case['frame']:
        frames = [Frame(case['frame'], [load_lidar_frame(case['frame'], 4)], LIDAR_FRAMES[case['frame']][2])]
    _, adapter, frames, _ = prepare(case['config'], checkpoint, frames=frames)
    if margin is not None:
        bounds = type(adapter).measure_bounds(adapter.model, frames[:1], margin)
        _, adapter, _, _ = prepare(case['config'], checkpoint, frames=frames, bounds=bounds)
    out_dir = Path(work_dir) / case['key']
    result = export_model(case['config'], checkpoint, out_dir, frames=frames[:1], bounds=adapter.bounds,
                          tiers=tiers if adapter.tier_bound_names else ())
    deployed = DeployedModel(out_dir, threads)
    adapter.load_host_state(deployed.info['host_state'])
    return adapter, frames, result, deployed


def measure(case, repeat, warmup, threads, work_dir, margin=None, tiers=()):
    """Export one case and time its three variants; returns a dict of milliseconds and the ORT stage split.

    ``margin``: bounds measured on the input times ``margin`` instead of the configured / default ones; ``tiers``:
    capacity tier scales of the export (detectors).
    """
    checkpoint = case.get('checkpoint', 'random')
    adapter, frames, result, deployed = export_case(case, checkpoint, work_dir, threads, tiers, margin)
    bounds, full = adapter.bounds, deployed.tiers[-1]
    data = frames[0].data

    def static():
        pre = adapter.pre_ops(data)
        return adapter.post_ops(adapter.run_torch_graph(pre.inputs), pre)

    def ort_full():
        pre = full.adapter.pre_ops(data)
        return full.adapter.post_ops(full.graph(pre.inputs), pre)

    with torch.inference_mode():  # every variant, as inference is run
        times = dict(eager=h.time_call(lambda: adapter.eager(data), repeat, warmup))
        # adapters without an eager() of their own run reference() as eager: the same call, timed once
        times['eager_spconv'] = (times['eager'] if type(adapter).eager is DeployAdapter.eager else
                                 h.time_call(lambda: adapter.reference(data), repeat, warmup))
        times.update(static=h.time_call(static, repeat, warmup), ort_full=h.time_call(ort_full, repeat, warmup))
        times['ort'], split = time_deployed(deployed, data, repeat, warmup)
    out = deployed.run(data)
    match = adapter.compare_results(out.results, adapter.reference(data))
    return dict(ms={k: v * 1e3 for k, v in times.items()}, ort_split_ms=split, nodes=result.summary.num_nodes,
                mib=result.info['graph']['bytes'] / 2**20, same=match.same, input=frames[0].name, bounds=bounds,
                tier=out.tier, tiers=[t.scale for t in deployed.tiers])


def time_deployed(deployed, data, repeat, warmup):
    """Median wall time (s) of ``deployed.run(data)`` (as :func:`_harness.time_call`) and the pre-ops / graph /
    post-ops ms of that median run, so that its parts add up to at most its time."""
    for _ in range(warmup):
        deployed.run(data)
    runs = []
    for _ in range(max(repeat, 1)):
        start = time.perf_counter()
        seconds = deployed.run(data).seconds
        runs.append((time.perf_counter() - start, seconds))
    total, seconds = sorted(runs, key=lambda run: run[0])[len(runs) // 2]
    return total, {k: v * 1e3 for k, v in seconds.items()}


def main(argv=None):
    """Command line (see the module docstring): time every selected model, print the table and the ``RESULT`` line."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='fewer repetitions (smoke run)')
    parser.add_argument('--threads', type=number(int, 1), default=1, help='torch and ONNX Runtime intra-op threads')
    parser.add_argument('--repeat', type=number(int, 1), default=None, help='timed runs per variant (median)')
    parser.add_argument('--margin', type=number(float, 1), default=None,
                        help='bounds = the input\'s needs x MARGIN (default: the configured / export-default bounds)')
    parser.add_argument('--only', nargs='+', choices=[c['key'] for c in CASES.values()], default=None,
                        help='run only these models')
    parser.add_argument('--slim-width', type=number(float, 0, 1), default=0.5,
                        help='also time the detectors slimmed to this width (0: no slim rows)')
    parser.add_argument('--checkpoint', nargs='+', metavar='DETECTOR=PATH',
                        help='trained weights per detector (fsd=PATH fsdv2=PATH; default random weights, which '
                        'select no box, so eager skips the box refiner and NMS that the fixed-shape graph runs)')
    parser.add_argument('--no-refiner-rows', action='store_true',
                        help='do not also time the detectors that have a box refiner without it')
    parser.add_argument('--tiers', type=float, nargs='*', default=DEFAULT_TIERS, metavar='SCALE',
                        help=f'capacity tiers of the detector exports (default {DEFAULT_TIERS}; none: --tiers)')
    args = parser.parse_args(argv)
    checkpoints = h.parse_checkpoints(args.checkpoint)
    repeat = args.repeat or (3 if args.quick else 10)
    from fsdlite.deploy.tiers import check_tier_scales
    try:
        tiers = check_tier_scales(args.tiers)
    except ValueError as exc:
        parser.error(f'--{exc}')
    warmup = 1 if args.quick else 2
    torch.set_num_threads(args.threads)
    import onnxruntime
    print(f'torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, {args.threads} thread(s), median of '
          f'{repeat} runs after {warmup} warm-up, weights: {checkpoints or "random"} (configured widths), batch 1, '
          'bounds '
          + (f'= input needs x {args.margin}' if args.margin else 'as configured (else measured x 1.5)')
          + f', detector capacity tiers {tiers or "none"}')
    rows, payload = [], {}
    with tempfile.TemporaryDirectory(prefix='fsdlite-deploy-bench-') as work_dir:
        cases = []
        for name, case in CASES.items():
            if args.only and case['key'] not in args.only:
                continue
            if case['key'] in checkpoints:
                case = dict(case, checkpoint=checkpoints[case['key']])
            cases.append((name, case))
            plain = None if args.no_refiner_rows or not case['frame'] else without_refiner_case(case, work_dir)
            if plain is not None:
                cases.append((f'{name} no refiner', plain))
            if case['frame'] and args.slim_width:
                cases.append((f'{name} w{args.slim_width:g}', slim_case(case, args.slim_width, work_dir)))
        for name, case in cases:
            r = measure(case, repeat, warmup, args.threads, work_dir, args.margin, tiers)
            ms, split = r['ms'], r['ort_split_ms']
            rows.append([name, r['input'], f'{ms["eager"]:.1f}', f'{ms["eager_spconv"]:.1f}', f'{ms["static"]:.1f}',
                         f'{ms["ort_full"]:.1f}', f'{ms["ort"]:.1f}', f'{r["tier"]:g}',
                         f'{split["pre_ops"]:.1f} / {split["graph"]:.1f} / {split["post_ops"]:.1f}',
                         f'{ms["eager"] / ms["ort_full"]:.2f}x', f'{ms["eager"] / ms["ort"]:.2f}x',
                         f'{ms["eager_spconv"] / ms["ort"]:.2f}x', 'yes' if r['same'] else 'NO'])
            payload[case['key']] = r
    h.print_table(['model', 'input', 'eager ms', 'eager spconv ms', 'static ms', 'ORT full ms', 'ORT ms', 'tier',
                   'ORT pre/graph/post ms', 'eager/ORT full', 'eager/ORT', 'spconv eager/ORT', 'same result'], rows)
    for column, label in (('eager', 'eager'), ('eager_spconv', 'eager with spconv')):
        slower = [k for k, r in payload.items() if r['ms']['ort'] > r['ms'][column]]
        print(f'target (ORT not slower than {label}): ' + ('met for all' if not slower else f'NOT met for {slower}'))
    h.print_result(dict(benchmark='deploy_latency', threads=args.threads, repeat=repeat, margin=args.margin,
                        results=payload))


if __name__ == '__main__':
    main()
