"""Where a deployed detector's time goes: PyTorch eager and ONNX Runtime per stage, side by side in one run.

For FSD-lite and FSDv2-lite (trained weights with ``--checkpoint``, else random ones at the configured widths, seed
0, which select no box; KITTI 000008, batch 1) the model is exported as shipped (``fsdlite.deploy.export_model``
with the default capacity tiers) and run both ways:

* ``eager`` -- the model's dynamic inference (``adapter.eager``), its stages timed from outside by
  ``_stages.record_stages`` (the stages of ``fsd_latency.py``); ``other``: the rest of the call;
* ``ORT`` -- the deploy pipeline: host pre-ops and post-ops timed on the host, and the graph of the capacity tier
  the frame runs on profiled by ONNX Runtime (``SessionOptions.enable_profiling``): every node's kernel time is
  billed to the stage of the submodule the exporter recorded for it (its name scopes); nodes of no submodule
  (grouping, gathers between stages) count as ``instances``, nodes ONNX Runtime fused beyond recognition as
  ``fused``; ``graph_rest`` is the unprofiled graph call (``graph wall``) minus the profiled kernels (ORT's work
  between kernels; negative where profiling slowed the kernels more), so the stages add up to the total.

Per model it prints a table (stage, eager ms, ORT ms, ORT / eager) and, at the end, one ``RESULT`` line.

    python benchmarks/deploy_stages.py [--checkpoint fsd=PATH fsdv2=PATH] [--only fsd fsdv2] [--threads N] [--repeat R]
"""
import argparse
import ast
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import onnx
import onnxruntime as ort
import torch

import _harness as h
from _stages import DETECTOR_STAGES, record_stages
from deploy_latency import CASES, DEFAULT_TIERS, export_case

from fsdlite.deploy.onnx_io import OrtGraph
from fsdlite.engine.tool_setup import number

DETECTORS = {name: case for name, case in CASES.items() if case['frame']}
#: submodule of the detector -> its stage (the submodules whose forward makes up a stage of DETECTOR_STAGES)
SUBMODULE_STAGE = {path: stage for stage, calls in DETECTOR_STAGES.items() for path, method in calls
                   if path and '.' not in path and method == 'forward'}


def node_stage(node):
    """Stage of an exported ONNX node: the stage of the detector submodule in its name scopes (the exporter's
    ``pkg.torch.onnx.name_scopes`` metadata: ``['', 'model.backbone', ...]``), else ``instances``."""
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = ast.literal_eval(meta.get('pkg.torch.onnx.name_scopes', '[]'))
    for scope in scopes[1:-1]:  # the last scope names the node itself
        parts = scope.split('.')
        if len(parts) >= 2 and parts[0] == 'model' and parts[1] in SUBMODULE_STAGE:
            return SUBMODULE_STAGE[parts[1]]
    return 'instances'


def profile_graph(path, inputs, threads, repeat, work_dir):
    """Mean milliseconds per stage of one ONNX graph over ``repeat`` profiled runs (after one warm-up)."""
    stage_of = {n.name: node_stage(n) for n in onnx.load(path, load_external_data=False).graph.node}
    prefix = Path(work_dir) / 'ort_profile'
    warm = OrtGraph(path, threads, profile_prefix=prefix)
    warm(inputs)
    warm.session.end_profiling()  # the warm-up's events go to a file of their own
    graph = OrtGraph(path, threads, profile_prefix=prefix)
    for _ in range(repeat):
        graph(inputs)
    with open(graph.session.end_profiling()) as f:
        events = json.load(f)
    ms = Counter()
    for event in events:
        if event.get('cat') == 'Node' and event['name'].endswith('_kernel_time'):
            name = event['name'][:-len('_kernel_time')]
            stage = stage_of.get(name, stage_of.get(name.replace('fused ', ''), 'fused'))
            ms[stage] += event['dur'] / 1e3 / repeat
    return dict(ms)


def eager_stages(adapter, data, repeat):
    """Median milliseconds per stage of ``adapter.eager(data)`` over ``repeat`` runs (after one warm-up); ``other``
    is the rest of the call, ``total`` the whole."""
    runs = []
    for i in range(repeat + 1):
        with torch.inference_mode(), record_stages(adapter.model) as rec:
            start = time.perf_counter()
            adapter.eager(data)
            total = time.perf_counter() - start
        if i:
            runs.append(dict(rec, other=total - sum(rec.values()), total=total))
    keys = {k for r in runs for k in r}
    return {k: 1e3 * statistics.median(r.get(k, 0.0) for r in runs) for k in keys}


def measure(case, threads, repeat, work_dir, checkpoint='random'):
    """Eager and ORT milliseconds per stage of one detector case (see the module docstring)."""
    adapter, frames, _, deployed = export_case(case, checkpoint, work_dir, threads, DEFAULT_TIERS)
    data = frames[0].data
    eager = eager_stages(adapter, data, repeat)
    with torch.inference_mode():
        boxes = len(adapter.eager(data)[0].pred_instances_3d.scores_3d)
        deployed.run(data)
        runs = [deployed.run(data) for _ in range(repeat)]
        tier = next(t for t in deployed.tiers if t.scale == runs[-1].tier)
        graph = profile_graph(tier.graph.path, tier.adapter.pre_ops(data).inputs, threads, repeat, work_dir)
    host = {k: 1e3 * statistics.median(r.seconds[k] for r in runs) for k in ('pre_ops', 'graph', 'post_ops')}
    ort_ms = dict(graph, graph_rest=host['graph'] - sum(graph.values()), host_pre_ops=host['pre_ops'],
                  host_post_ops=host['post_ops'])
    ort_ms['total'] = host['pre_ops'] + host['graph'] + host['post_ops']
    return dict(eager_ms=eager, ort_ms=ort_ms, graph_wall_ms=host['graph'], tier=runs[-1].tier, boxes=boxes)


def stage_rows(result):
    """Table rows (stage, eager ms, ORT ms, ORT / eager) of one :func:`measure` result, in pipeline order."""
    eager, ort_ms = result['eager_ms'], result['ort_ms']
    order = (['host_pre_ops', 'voxelize', 'pre_ops'] + list(DETECTOR_STAGES)
             + ['fused', 'graph_rest', 'other', 'host_post_ops'])
    names = [s for s in dict.fromkeys(order + sorted(set(eager) | set(ort_ms))) if s != 'total'
             and (eager.get(s, 0) or ort_ms.get(s, 0))]
    rows = []
    for name in names + ['total']:
        e, o = eager.get(name, 0.0), ort_ms.get(name, 0.0)
        rows.append([name, f'{e:.1f}', f'{o:.1f}', f'{o / e:.2f}x' if e else '-'])
    return rows


def main(argv=None):
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--checkpoint', nargs='+', metavar='DETECTOR=PATH', help='trained weights per detector')
    parser.add_argument('--only', nargs='+', choices=[c['key'] for c in DETECTORS.values()], default=None,
                        help='run only these detectors')
    parser.add_argument('--threads', type=number(int, 1), default=1, help='torch and ONNX Runtime intra-op threads')
    parser.add_argument('--repeat', type=number(int, 1), default=5, help='timed runs per variant')
    args = parser.parse_args(argv)
    checkpoints = h.parse_checkpoints(args.checkpoint)
    torch.set_num_threads(args.threads)
    print(f'torch {torch.__version__}, onnxruntime {ort.__version__}, {args.threads} thread(s), {args.repeat} runs '
          f'after 1 warm-up, weights: {checkpoints or "random"}, KITTI 000008, tiers {DEFAULT_TIERS}')
    payload = {}
    with tempfile.TemporaryDirectory(prefix='fsdlite-deploy-stages-') as work_dir:
        for name, case in DETECTORS.items():
            if args.only and case['key'] not in args.only:
                continue
            result = measure(case, args.threads, args.repeat, work_dir, checkpoints.get(case['key'], 'random'))
            print(f'\n{name}: {result["boxes"]} boxes; ORT on tier {result["tier"]:g}, graph wall '
                  f'{result["graph_wall_ms"]:.1f} ms')
            rows = stage_rows(result)
            h.print_table(['stage', 'eager ms', 'ORT ms', 'ORT / eager'], rows)
            payload[case['key']] = dict(result, stages=[row[0] for row in rows[:-1]])  # in pipeline order
    h.print_result(dict(benchmark='deploy_stages', threads=args.threads, repeat=args.repeat,
                        weights=checkpoints or 'random', results=payload))


if __name__ == '__main__':
    main()
