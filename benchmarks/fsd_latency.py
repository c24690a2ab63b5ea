"""FSD-lite and FSDv2-lite: per-stage latency (ms) and peak memory, dynamic vs static (fixed-shape) mode, CPU or GPU.

Frames: the real KITTI frame (../shared/data/kitti_object_000008, KITTI-range configs) and spconv's 198k-point
Waymo-range frame (../shared/data/spconv_waymo/benchmark-pc.npz, configs/*/..._waymo_range.py; a zero intensity
column is appended).  Both modes share the weights: a trained checkpoint per detector with ``--checkpoint``, else
random weights (seed 0) with the box score threshold at 0 so that boxes come out (the output says which).
Stages are timed from outside the models (``_stages.record_stages`` wraps their submodules' calls); ``voxelize`` is
the data preprocessor, ``pre_ops`` the fixed-shape run's padding + first-stage rulebooks (``fsdlite.deploy.fixed_shape``),
``nms`` runs after the fixed-shape graph.
Peak memory of one preprocess + predict runs in a fresh subprocess per variant (``_harness.run_isolated``).

    python benchmarks/fsd_latency.py                              # both frames, 3 timed runs per variant
    python benchmarks/fsd_latency.py --quick                      # KITTI frame only, 1 timed run
    python benchmarks/fsd_latency.py --checkpoint fsd=work_dirs/fsd/iter_1000.pth fsdv2=work_dirs/v2/iter_1000.pth
    python benchmarks/fsd_latency.py --device cuda                # on a GPU, as deployed (see below)

``--device cuda`` runs the models as deployed on a GPU: the stage timers synchronise the device at both ends of
every stage, peak memory is ``torch.cuda.max_memory_allocated`` of the timed runs, and a third variant, ``graph``,
replays the fixed-shape forward as one CUDA graph (captured once on that frame's padded inputs: fixed shapes are
what make the capture possible); its ``pre_ops`` and ``nms`` run eagerly around the replay. A capture that fails
is reported in the table instead of ending the run.

Ends with ``RESULT {json}`` (per variant: stage ms, total ms, peak bytes, boxes; static/dynamic ratios).
"""
import argparse
import statistics
import time
from pathlib import Path

import _harness as h
from _stages import record_stages

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / 'shared' / 'data'
CONFIGS = {('kitti', 'fsd'): 'configs/fsd/fsdlite_kitti_static.py',
           ('kitti', 'fsdv2'): 'configs/fsdv2/fsdv2lite_kitti_static.py',
           ('waymo', 'fsd'): 'configs/fsd/fsdlite_waymo_range.py',
           ('waymo', 'fsdv2'): 'configs/fsdv2/fsdv2lite_waymo_range.py'}
STAGES = ('voxelize', 'pre_ops', 'vfe', 'backbone', 'neck_head', 'fg_sampling', 'instances', 'sir',
          'virtual_voxels', 'mixer_rulebooks', 'mixer', 'box_head', 'refiner', 'graph', 'nms')


def load_frame(frame, data_root=DATA):
    """(N, 4) float32 points of the frame."""
    import numpy as np
    import torch
    if frame == 'kitti':
        points = np.fromfile(Path(data_root) / 'kitti_object_000008' / '000008.bin', np.float32).reshape(-1, 4)
        return torch.from_numpy(points)
    xyz = torch.from_numpy(np.load(Path(data_root) / 'spconv_waymo' / 'benchmark-pc.npz')['pc'])
    return torch.cat([xyz, torch.zeros(xyz.shape[0], 1)], 1)


def build(frame, detector, static, checkpoint=None, device='cpu'):
    """The config's model with shared weights (checkpoint or seed 0), eval, on ``device``; for ``static`` wrapped so
    that it predicts through the fixed-shape run (``fsdlite.deploy.fixed_shape.FixedShapeDetector``)."""
    import torch
    from mmengine.config import Config

    import fsdlite.models  # noqa: F401
    from fsdlite.deploy.fixed_shape import FixedShapeDetector
    from fsdlite.registry import MODELS
    cfg = Config.fromfile(str(REPO / CONFIGS[(frame, detector)])).model.to_dict()
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    if checkpoint:
        from mmengine.runner import load_checkpoint
        load_checkpoint(model, checkpoint, map_location='cpu', strict=True)
    else:
        model.bbox_head.test_cfg['score_thr'] = 0.0  # random weights: every instance is a box candidate
    model = model.eval().to(device)
    return FixedShapeDetector(model) if static else model


def work(frame, detector, static, checkpoint=None):
    """Zero-arg callable for run_isolated: preprocess + predict of one frame."""
    import torch
    model = build(frame, detector, static, checkpoint)
    points = load_frame(frame)
    data = dict(inputs=dict(points=[points]))

    def run():
        with torch.inference_mode():
            model(**model.data_preprocessor(data, False), mode='predict')

    return run


def _synchronize(device):
    import torch
    return torch.cuda.synchronize if torch.device(device).type == 'cuda' else None


def timed_runs(model, points, repeat, device='cpu'):
    """Median per-stage seconds over ``repeat`` runs (after one warm-up) and the last detections."""
    import torch
    data = dict(inputs=dict(points=[points.to(device)]))
    sync = _synchronize(device)
    runs = []
    for i in range(repeat + 1):
        with torch.inference_mode(), record_stages(getattr(model, 'detector', model), sync) as rec:
            sync and sync()
            start = time.perf_counter()
            inputs = model.data_preprocessor(data, False)['inputs']
            sync and sync()
            rec['voxelize'] += time.perf_counter() - start
            start = time.perf_counter()
            pred = model(inputs, mode='predict')[0].pred_instances_3d
            sync and sync()
            total = time.perf_counter() - start + rec['voxelize']
        if i:
            runs.append(dict(rec, total=total))
    keys = sorted({k for r in runs for k in r})
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}, pred


def graph_runs(model, points, repeat):
    """The fixed-shape forward replayed as a CUDA graph: median stage seconds (``voxelize``, ``pre_ops`` eager,
    ``graph`` the replay, ``nms``) and the last detections; raises what the capture raised."""
    import torch

    from fsdlite.deploy.detector import DetectorGraph
    from fsdlite.deploy.fixed_shape import fixed_inputs
    model = model.detector  # the FixedShapeDetector's detector
    data = dict(inputs=dict(points=[points.cuda()]))
    with torch.inference_mode():
        inputs = model.data_preprocessor(data, False)['inputs']
        si = fixed_inputs(model, inputs)
        module = DetectorGraph(model, inputs['batch_size'], ('boxes', 'scores', 'labels', 'box_batch', 'num_boxes'))
        static_args = [t.clone() for t in (*si[:6], *si.nbrs)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            module(*static_args)  # warm-up outside the capture (allocations, lazy initialisation)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = module(*static_args)
    runs = []
    for i in range(repeat + 1):
        with torch.inference_mode():
            torch.cuda.synchronize()
            times, start = {}, time.perf_counter()
            inputs = model.data_preprocessor(data, False)['inputs']
            torch.cuda.synchronize()
            times['voxelize'], start = time.perf_counter() - start, time.perf_counter()
            si = fixed_inputs(model, inputs)
            for buffer, value in zip(static_args, (*si[:6], *si.nbrs)):
                buffer.copy_(value)
            torch.cuda.synchronize()
            times['pre_ops'], start = time.perf_counter() - start, time.perf_counter()
            graph.replay()
            torch.cuda.synchronize()
            times['graph'], start = time.perf_counter() - start, time.perf_counter()
            out = dict(zip(module.output_names, outputs))
            n = int(out['num_boxes'])
            boxes, scores, labels, batch = (out[k][:n] for k in ('boxes', 'scores', 'labels', 'box_batch'))
            keep = model.bbox_head.nms(boxes, scores, labels, batch)
            pred = model.to_samples(boxes[keep], scores[keep], labels[keep], batch[keep], 1, None)[0]
            torch.cuda.synchronize()
            times['nms'] = time.perf_counter() - start
        if i:
            runs.append(dict(times, total=sum(times.values())))
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}, pred.pred_instances_3d


def same_detections(a, b, tol=1e-3):
    """Whether two predictions hold the same boxes and scores (order by score, then x) within ``tol``."""
    import torch
    if a.bboxes_3d.shape != b.bboxes_3d.shape:
        return False
    if not a.bboxes_3d.shape[0]:
        return True
    order = lambda p: torch.argsort(p.scores_3d * 1e3 + p.bboxes_3d[:, 0] * 1e-3, descending=True)  # noqa: E731
    ia, ib = order(a), order(b)
    return bool(torch.allclose(a.bboxes_3d[ia], b.bboxes_3d[ib], atol=tol)
                and torch.allclose(a.scores_3d[ia], b.scores_3d[ib], atol=tol))


def _peak(device, fn):
    """Peak bytes of ``fn``: a fresh subprocess on the CPU (``_harness.run_isolated``), the allocator's peak of the
    timed runs on CUDA."""
    import torch
    if torch.device(device).type != 'cuda':
        return fn()['peak_bytes']
    return float(torch.cuda.max_memory_allocated())


def main(argv=None):
    """Command line (see the module docstring): time the modes per frame and detector, print the table and the
    ``RESULT`` line."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--quick', action='store_true', help='KITTI frame only, one timed run')
    parser.add_argument('--repeat', type=int, default=3, help='timed runs per variant (median)')
    parser.add_argument('--frames', nargs='+', choices=('kitti', 'waymo'), default=None)
    parser.add_argument('--detectors', nargs='+', choices=('fsd', 'fsdv2'), default=['fsd', 'fsdv2'])
    parser.add_argument('--checkpoint', nargs='+', metavar='DETECTOR=PATH', help='trained weights per detector')
    parser.add_argument('--threads', type=int, default=1, help='torch threads (default 1)')
    parser.add_argument('--no-memory', action='store_true', help='skip the peak-memory measurement')
    parser.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda': the models as deployed on a GPU")
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise SystemExit('--device cuda: torch sees no CUDA device here')
    checkpoints = h.parse_checkpoints(args.checkpoint)
    frames = args.frames or (['kitti'] if args.quick else ['kitti', 'waymo'])
    repeat = 1 if args.quick else args.repeat
    modes = ('dynamic', 'static', 'graph') if device.type == 'cuda' else ('dynamic', 'static')
    rows, results = [], {}
    for frame in frames:
        points = load_frame(frame)
        for det in args.detectors:
            weights = f'checkpoint {checkpoints[det]}' if det in checkpoints else 'random weights, score_thr 0'
            preds = {}
            for mode in modes:
                key = f'{frame}/{det}/{mode}'
                model = build(frame, det, mode != 'dynamic', checkpoints.get(det), device)
                if device.type == 'cuda':
                    torch.cuda.reset_peak_memory_stats()
                try:
                    if mode == 'graph':
                        times, preds[mode] = graph_runs(model, points, repeat)
                    else:
                        times, preds[mode] = timed_runs(model, points, repeat, device)
                except Exception as exc:  # a failed CUDA-graph capture is a result, not the end of the run
                    if mode != 'graph':
                        raise
                    results[key] = dict(error=f'{type(exc).__name__}: {str(exc).splitlines()[0][:200]}')
                    rows.append([frame, det, mode, points.shape[0]] + ['-'] * len(STAGES)
                                + ['failed', '-', results[key]['error'][:60]])
                    print(f'[{key}] CUDA graph capture failed: {results[key]["error"]}', flush=True)
                    continue
                mem = float('nan') if args.no_memory else _peak(device, lambda: h.run_isolated(
                    __file__, 'work', dict(frame=frame, detector=det, static=mode == 'static',
                                           checkpoint=checkpoints.get(det)), threads=args.threads))
                results[key] = dict(stages_ms={k: round(v * 1e3, 2) for k, v in times.items() if k != 'total'},
                                    total_ms=round(times['total'] * 1e3, 1), peak_bytes=mem,
                                    boxes=int(preds[mode].bboxes_3d.shape[0]), weights=weights,
                                    params=sum(p.numel() for p in model.parameters()))
                rows.append([frame, det, mode, points.shape[0]]
                            + [f'{times[s] * 1e3:.1f}' if s in times else '-' for s in STAGES]
                            + [f'{times["total"] * 1e3:.1f}', h.fmt_bytes(mem), results[key]['boxes']])
            dyn = results[f'{frame}/{det}/dynamic']
            for mode in modes[1:]:
                if 'error' in results[f'{frame}/{det}/{mode}']:
                    continue
                other = results[f'{frame}/{det}/{mode}']
                other['same_detections_as_dynamic'] = same_detections(preds['dynamic'], preds[mode])
                results[f'{frame}/{det}/{mode}_over_dynamic'] = dict(
                    time=round(other['total_ms'] / dyn['total_ms'], 2),
                    memory=round(other['peak_bytes'] / dyn['peak_bytes'], 2)
                    if dyn['peak_bytes'] == dyn['peak_bytes'] and dyn['peak_bytes'] else None)
                print(f'[{frame}/{det}] {weights}; params {dyn["params"] / 1e6:.2f} M; {mode}/dynamic time '
                      f'{results[f"{frame}/{det}/{mode}_over_dynamic"]["time"]}; same detections (float32, 1e-3): '
                      f'{other["same_detections_as_dynamic"]}', flush=True)
    print()
    where = (f'{torch.cuda.get_device_name(device)}, synchronised stage timers; peak memory: allocator peak of the '
             'timed runs' if device.type == 'cuda' else f'CPU, {args.threads} thread(s); peak memory of one frame '
             'in a fresh process')
    print(f'Latency per stage (ms, median of {repeat}) on {where}')
    h.print_table(['frame', 'detector', 'mode', 'points'] + list(STAGES) + ['total', 'peak mem', 'boxes'], rows)
    h.print_result(dict(benchmark='fsd_latency', device=str(device), threads=args.threads, repeat=repeat,
                        variants=results))


if __name__ == '__main__':
    main()
