"""Slimming benchmark: original vs slimmed (width 0.5; a depth-reduced setting; both) for FSD-lite, VoxelNet
and KPCNN -- parameters, multiply-accumulates, CPU latency, peak memory and the task metric, before and after a
short fine-tune with the config's own (rescaled) schedule.

    python benchmarks/slim.py --fsd-ckpt F.pth --voxelnet-ckpt V.pth --kpcnn-ckpt K.pth [--out work_dirs/bench_slim]
    python benchmarks/slim.py --quick       # sanity run: fresh weights, tiny eval sets, 2 fine-tune iterations

Every variant is measured on the same samples (batch 1, one torch thread): MACs on the first item of the
config's val set; latency = mean over the first ``--latency-frames`` val items of the median of ``--repeat``
predict forwards (in ``torch.inference_mode``), for the slimmed weights before and after the fine-tune, all
variants of a family timed together at the end in turns (round robin over frames and repeats, so machine load hits
them alike) in a fresh process (after the fine-tunes the benchmark's own process runs the models slower, unevenly) (a
detector's later stages depend on what it predicts, so the fine-tuned latency is the one that counts; the
speed-up uses it); peak memory = RSS growth of one predict forward in a fresh process
(``_harness.run_isolated``). The metric is the config's test evaluator on a held-out set (FSD-lite: 3D mAP
over Car/Pedestrian/Cyclist on 300 frames of the synthetic 'test' split, used by neither training nor validation;
VoxelNet: voxel material accuracy; KPCNN: shape accuracy, on the config's test set).
Fine-tuning CPU time is the process CPU time of the training run. The slim weights are calibrated
(``--calibration-items``, default 64): each layer's kept inputs take over the least-squares prediction of the dropped
ones on the original's activations over the first training items (``fsdlite.slim.compensate``; a few CPU seconds,
printed); ``--calibration-items 0`` slices plainly.

Control: the original gets the same fine-tune as the slim variants (``--no-control`` skips it), so a slim model's
extra training is not mistaken for a better model: speed-ups and the metric drop compare fine-tuned with
fine-tuned (the original's un-tuned row is printed too).

Fine-tune recipe: the config's schedule rescaled to the iterations, at the family's peak learning rate (FSD-lite
4e-3, the others their config's) unless ``--finetune-lr FAMILY=LR`` sets one (the same for the control). The slim
variants (not the control) learn the outputs of the family's ``distill`` module from the original
(``fsdlite.slim.distill``; ``--no-distill`` turns it off). The control fine-tunes after the slim variants: a process
that has fine-tuned runs slower, and that must not bill the slim variants' CPU time.

Targets checked for FSD-lite: width 0.5 >= 2x faster on CPU; after a fine-tune of <= 15 CPU minutes,
within 5 AP points of the original. Give a well-trained original: the 1000-iteration demo schedule is far from it,
and any fine-tune then looks like a gain (``tools/train.py configs/fsd/fsdlite_synthetic.py --cfg-options
train_cfg.max_iters=10000 train_cfg.val_interval=10000`` trains a longer one). The control fine-tune of a run
is written to ``OUT/fsd/finetune/original/iter_5000.pth`` and can be the next run's original. The drop is taken
against the fine-tuned original (the control) unless ``--no-control``. Ends with ``RESULT {json}``; the runs so far
are in docs/benchmarks.md.
"""
import argparse
import json
import os.path as osp
import time
from pathlib import Path

import _harness as h

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / 'benchmarks' / 'forward_worker.py'
FAMILIES = {
    # FSD-lite w0.5 fine-tune: 4500 iterations at 4e-3 with seg_head distillation (its runs: docs/benchmarks.md)
    'fsd': dict(config='configs/fsd/fsdlite_synthetic.py', metric='det/3D_mAP', finetune=4500, finetune_lr=4e-3,
                # 300 frames of the 'test' split (never seen in training or validation): the config's 50 val
                # frames are too few to tell fine-tunes apart (docs/benchmarks.md, History)
                evaluation={'test_dataloader.dataset.split': 'test', 'test_dataloader.dataset.num_frames': 300},
                distill='seg_head',   # the original teaches the slim variants' segmentation and votes
                depth={'backbone.encoder_channels.2': 1, 'sir.block_channels': 2},
                quick={'val_dataloader.dataset.num_frames': 2, 'test_dataloader.dataset.num_frames': 2,
                       'train_dataloader.dataset.num_frames': 2, 'train_dataloader.batch_size': 1}),
    'voxelnet': dict(config='configs/voxelnet/voxelnet_random_blocks.py', metric='voxel/accuracy', finetune=1500,
                     depth={'muon_stage.gravnet.hidden_channels': 1, 'voxel_stage.gravnet.hidden_channels': 1},
                     quick={'val_dataloader.dataset.num_volumes': 2, 'test_dataloader.dataset.num_volumes': 2,
                            'train_dataloader.batch_size': 1, 'val_dataloader.batch_size': 1,
                            'test_dataloader.batch_size': 1}),
    'kpcnn': dict(config='configs/kpconv/kpcnn_kpconv_shapes.py', metric='cls/acc', finetune=200,
                  depth={'backbone.blocks.2': 1, 'backbone.blocks.3': 1},
                  quick={'val_dataloader.dataset.num_samples': 4, 'test_dataloader.dataset.num_samples': 4,
                         'train_dataloader.batch_size': 2}),
}
FSD_SPEEDUP_TARGET, FSD_AP_DROP_TARGET, FSD_FINETUNE_CPU_MIN = 2.0, 5.0, 15.0


def family_value(cast, low):
    """An argparse ``type=`` for ``FAMILY=VALUE``: a known family and a finite value > ``low`` (see
    :func:`fsdlite.engine.tool_setup.number`); returns ``(family, value)``."""
    from fsdlite.engine.tool_setup import number
    parse_value = number(cast, low, low_open=True)

    def parse(text):
        family, sep, value = text.partition('=')
        if not sep or family not in FAMILIES:
            raise argparse.ArgumentTypeError(f'expected FAMILY=VALUE with FAMILY one of {", ".join(FAMILIES)}, '
                                             f'got {text!r}')
        return family, parse_value(value)
    return parse


def parse_args(argv=None):
    """Command-line options (argparse namespace)."""
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    for name in FAMILIES:
        p.add_argument(f'--{name}-ckpt', help=f'trained checkpoint of {FAMILIES[name]["config"]}')
    p.add_argument('--families', nargs='+', choices=list(FAMILIES), default=list(FAMILIES))
    p.add_argument('--finetune-iters', nargs='+', type=family_value(int, 0), metavar='FAMILY=N', default=[],
                   help='fine-tune iterations per family (default: ' +
                   ', '.join(f'{k}={v["finetune"]}' for k, v in FAMILIES.items()) + ')')
    p.add_argument('--finetune-lr', nargs='+', type=family_value(float, 0), metavar='FAMILY=LR', default=[],
                   help="peak learning rate of the fine-tunes per family (default: the config's own)")
    p.add_argument('--width', type=float, default=0.5)
    p.add_argument('--variants', nargs='+', choices=('width', 'depth', 'both'), default=['width', 'depth', 'both'],
                   help="slimmed variants: width only, the family's depth reduction only, or both")
    p.add_argument('--repeat', type=int, default=5, help='timed forwards per frame and variant (median)')
    p.add_argument('--latency-frames', type=int, default=20, help='val frames the latency is averaged over')
    p.add_argument('--out', default='work_dirs/bench_slim')
    p.add_argument('--quick', action='store_true', help='fresh weights, tiny eval sets, 2 fine-tune iterations')
    p.add_argument('--no-memory', action='store_true', help='skip the fresh-process peak-memory measurements')
    p.add_argument('--calibration-items', type=int, default=64, metavar='N',
                   help="least-squares compensation of dropped channels on the original's activations over the "
                        'first N training items (default 64; 0: plain slicing)')
    p.add_argument('--no-distill', action='store_true',
                   help="fine-tune the slim variants without the original as teacher (by default a family's 'distill' "
                        'module learns the original\'s outputs: fsdlite.slim.distill; FSD-lite: seg_head)')
    p.add_argument('--no-control', action='store_true',
                   help='do not fine-tune the original (by default it gets the same fine-tune as the slim variants, '
                        'and the speed-up / metric drop compare fine-tuned with fine-tuned)')
    return p.parse_args(argv)


def peak_memory(config, ckpt, options):
    """Peak RSS growth (bytes) of one predict forward of ``config`` with ``ckpt`` in a fresh process; NaN when
    that run failed."""
    res = h.run_isolated(WORKER, 'forward_work', dict(config=str(config), checkpoint=ckpt, cfg_options=options),
                         threads=1)
    return res['peak_bytes'] if res['ok'] else float('nan')


def interleaved_latency(models, frames, repeat):
    """``{key: seconds}``: mean over ``frames`` of the median predict time of each model in ``models``.

    The models take turns on every frame and repeat (round robin), so a busy machine slows them alike. They run in
    ``torch.inference_mode`` (as :func:`fsdlite.slim.cost.measure_latency` does).
    """
    import statistics

    import torch
    times = {key: [[] for _ in frames] for key in models}
    with torch.inference_mode():
        for model in models.values():
            model.eval()(**frames[0], mode='predict')  # warm-up
        for _ in range(repeat):
            for i, data in enumerate(frames):
                for key, model in models.items():
                    start = time.perf_counter()
                    model(**data, mode='predict')
                    times[key][i].append(time.perf_counter() - start)
    return {key: sum(statistics.median(t) for t in per_frame) / len(frames) for key, per_frame in times.items()}


def latency_frames(cfg, model, count):
    """Up to ``count`` preprocessed single-frame batches of the val set of ``cfg`` (at least one item)."""
    from fsdlite.datasets.from_config import config_batches
    batches, _ = config_batches(cfg, 'val', range(max(1, count)), model=model, what='latency frames', clip=True)
    return list(batches)


def isolated_latency(variants, config, options, frame_count, repeat):
    """:func:`interleaved_latency` of models rebuilt in this (fresh) process (run by ``_harness.call_isolated``).

    Args:
        variants (dict): key -> ``[config path, weights file, cfg options or None]``.
        config (str), options (dict | None): the config whose val items are timed (the original's).
        frame_count, repeat (int): see :func:`interleaved_latency`.
    Returns:
        dict: key -> seconds.
    """
    import torch

    from fsdlite.engine.tool_setup import load_config
    from fsdlite.registry import MODELS
    torch.set_num_threads(1)
    models = {}
    for key, (cfg_path, weights, opts) in variants.items():
        models[key] = load_weights(MODELS.build(load_config(cfg_path, opts, allow_new_keys=True).model), weights)
    cfg = load_config(config, options, allow_new_keys=True)
    frames = latency_frames(cfg, next(iter(models.values())), frame_count)
    return interleaved_latency(models, frames, repeat)


def load_weights(model, checkpoint):
    """Load ``checkpoint`` into ``model`` (strict) and return it in eval mode."""
    from mmengine.runner import load_checkpoint
    load_checkpoint(model, checkpoint, map_location='cpu', strict=True, logger='silent')
    return model.eval()


def metric_of(config, ckpt, work, options, key):
    """``(metrics.get(key, NaN), metrics)`` of ``ckpt`` on the config's test set
    (:func:`fsdlite.slim.finetune.evaluate`, work dir ``work``)."""
    from fsdlite.slim.finetune import evaluate
    metrics = evaluate(str(config), ckpt, work, options)
    return metrics.get(key, float('nan')), metrics


def run_family(name, spec, args, ckpt):
    """Rows of one family: original, width-slimmed, depth-reduced; each evaluated, the slim ones fine-tuned."""
    import torch

    from fsdlite.slim.api import prepare, write_slim
    from fsdlite.slim.cost import count_macs, count_params
    from fsdlite.slim.engine import SlimRequest
    from fsdlite.slim.finetune import finetune

    torch.set_num_threads(1)
    options = dict(spec['quick']) if args.quick else {}
    config = REPO / spec['config']
    out = Path(args.out) / name
    iters = dict(args.finetune_iters).get(name, 2 if args.quick else spec['finetune'])
    eval_options = {**options, **({} if args.quick else spec.get('evaluation', {}))}
    lr = dict(args.finetune_lr).get(name, spec.get('finetune_lr'))
    module = None if args.no_distill else spec.get('distill')
    print(f'\n=== {name}: {spec["config"]} (checkpoint {ckpt}) ===', flush=True)
    cpu0 = time.process_time()
    prepared = prepare(str(config), ckpt, options, log=print, calibration=args.calibration_items)
    calibrated = f' and calibrated on up to {args.calibration_items} training items' if args.calibration_items else ''
    print(f'traced{calibrated} in {time.process_time() - cpu0:.1f} CPU s', flush=True)
    variants = [('original', str(config), ckpt, options, None)]
    requests = {'width': (f'width {args.width}', SlimRequest(width=args.width)),
                'depth': ('depth', SlimRequest(depth=dict(spec['depth']))),
                'both': (f'width {args.width} + depth', SlimRequest(width=args.width, depth=dict(spec['depth'])))}
    for key in args.variants:
        label, request = requests[key]
        written = write_slim(prepared, request, str(out / key))
        variants.append((label, written.config_path, written.checkpoint_path, None, written))
    rows, timed = [], {}   # timed: 'index/latency field' -> [config, weights, options], measured together at the end
    latency_dir = out / 'latency'
    latency_dir.mkdir(parents=True, exist_ok=True)
    def tune(index, tag, cfg_path, weights, opts, teacher):
        """Fine-tune variant ``index`` (with the original as teacher of module ``teacher`` when given), evaluate it
        and queue its fine-tuned latency."""
        cpu0, wall0 = time.process_time(), time.perf_counter()
        distill = None if teacher is None else dict(
            teacher_config=str(config), teacher_checkpoint=str(latency_dir / 'original.pth'), module=teacher,
            teacher_options=options or None)   # the original's weights as built (fresh ones with --quick)
        tuned = finetune(cfg_path, weights, iters, str(out / 'finetune' / tag), opts, lr=lr, distill=distill)
        row = rows[index]
        row.update(finetune_iters=iters, finetune_lr=lr, finetune_distill=teacher,
                   finetune_cpu_min=(time.process_time() - cpu0) / 60,
                   finetune_wall_min=(time.perf_counter() - wall0) / 60)
        row['metric_finetuned'], row['metrics_finetuned'] = metric_of(
            cfg_path, tuned, str(out / 'eval' / (tag + '_ft')), {**(opts or {}), **eval_options}, spec['metric'])
        timed[f'{index}/latency_ft_s'] = [str(cfg_path), str(tuned), opts]

    for label, cfg_path, weights, opts, written in variants:
        tag = label.replace(' ', '_').replace('+', 'and')
        model = prepared.model if written is None else written.slim_model
        macs, _, uncounted = count_macs(model, prepared.data)
        untuned = latency_dir / f'{tag}.pth'  # the weights as built (fresh weights in --quick runs, too)
        torch.save(dict(state_dict=model.state_dict()), untuned)
        timed[f'{len(rows)}/latency_s'] = [str(cfg_path), str(untuned), opts]
        peak = float('nan') if args.no_memory else peak_memory(cfg_path, weights, opts)
        value, metrics = metric_of(cfg_path, weights, str(out / 'eval' / tag), {**(opts or {}), **eval_options},
                                   spec['metric'])
        row = dict(family=name, variant=label, params=count_params(model), macs=int(macs), peak_bytes=peak,
                   metric=value, metric_name=spec['metric'], metrics=metrics, uncounted_ops=dict(uncounted))
        if written is not None:
            row['changes'] = [list(c) for c in written.result.changes]
            row['depth'] = {k: v for k, v in spec['depth'].items()} if 'depth' in label else {}
            row['slim_config'], row['slim_checkpoint'] = cfg_path, weights
        rows.append(row)
        if written is not None:
            tune(len(rows) - 1, tag, cfg_path, weights, opts, teacher=module)
    if not args.no_control:   # last: a process that has fine-tuned runs slower, which must not bill the slim variants
        tune(0, 'original', str(config), ckpt, options, teacher=None)
    latencies = h.call_isolated(Path(__file__).resolve(), 'isolated_latency', dict(
        variants=timed, config=str(config), options=options, frame_count=args.latency_frames, repeat=args.repeat))
    for key, seconds in latencies.items():
        index, field = key.split('/')
        rows[int(index)][field] = seconds
    base = rows[0].get('latency_ft_s', rows[0]['latency_s'])  # the fine-tuned original when it was fine-tuned
    for row in rows:
        latency = row.get('latency_ft_s', row['latency_s'])
        row['speedup'] = base / latency if latency else float('nan')
    return rows


def fmt(v, scale=1.0, digits=1):
    """``v * scale`` with ``digits`` decimals, 'n/a' for None or NaN."""
    return 'n/a' if v is None or v != v else f'{v * scale:.{digits}f}'


def main(argv=None):
    """Command line (see the module docstring): benchmark every family with a checkpoint (all with ``--quick``), print
    the table and the ``RESULT`` line, write ``slim_benchmark.json`` under ``--out``."""
    args = parse_args(argv)
    all_rows = []
    for name in args.families:
        ckpt = getattr(args, f'{name}_ckpt')
        if ckpt is None and not args.quick:
            print(f'[{name}] skipped: no --{name}-ckpt (use --quick for a sanity run with fresh weights)')
            continue
        if ckpt is not None and not osp.isfile(ckpt):
            raise SystemExit(f'--{name}-ckpt {ckpt!r} does not exist')
        all_rows += run_family(name, FAMILIES[name], args, ckpt)
    table = [[r['family'], r['variant'], f"{r['params']:,}", fmt(r['macs'], 1e-6), fmt(r['latency_s'], 1e3),
              fmt(r.get('latency_ft_s'), 1e3), f"{r['speedup']:.2f}x", fmt(r['peak_bytes'], 2 ** -20),
              r['metric_name'], fmt(r['metric'], 100, 2),
              fmt(r.get('metric_finetuned'), 100, 2), str(r.get('finetune_iters', '')),
              '' if 'finetune_iters' not in r else f"{r['finetune_lr'] or 'config'}",
              r.get('finetune_distill') or '',
              fmt(r.get('finetune_cpu_min'), 1, 1)] for r in all_rows]
    print()
    h.print_table(['family', 'variant', 'params', 'MMACs', 'latency ms', 'after FT ms', 'speed-up', 'peak MiB',
                   'metric', 'before FT x100', 'after FT x100', 'FT iters', 'FT lr', 'FT teacher', 'FT CPU min'], table)
    summary = {}
    fsd = [r for r in all_rows if r['family'] == 'fsd']
    if fsd and any(r['variant'] == f'width {args.width}' for r in fsd):
        orig, slim = fsd[0], next(r for r in fsd if r['variant'] == f'width {args.width}')
        drop = (orig.get('metric_finetuned', orig['metric']) - slim.get('metric_finetuned', float('nan'))) * 100
        summary = dict(fsd_speedup=slim['speedup'], fsd_speedup_ok=slim['speedup'] >= FSD_SPEEDUP_TARGET,
                       fsd_ap_drop_points=drop, fsd_ap_ok=drop <= FSD_AP_DROP_TARGET,
                       fsd_finetune_cpu_min=slim.get('finetune_cpu_min'),
                       fsd_finetune_budget_ok=(slim.get('finetune_cpu_min') or 0) <= FSD_FINETUNE_CPU_MIN)
        verdict = {True: 'met', False: 'NOT met'}.get
        print(f"\nFSD-lite width {args.width}: speed-up {slim['speedup']:.3f}x (target >= {FSD_SPEEDUP_TARGET}x: "
              f"{verdict(summary['fsd_speedup_ok'])}); 3D mAP drop after fine-tune {drop:.2f} points (target <= "
              f"{FSD_AP_DROP_TARGET}: {verdict(summary['fsd_ap_ok'])}) in {fmt(slim.get('finetune_cpu_min'))} CPU "
              f"min (budget {FSD_FINETUNE_CPU_MIN}: {verdict(summary['fsd_finetune_budget_ok'])})")
    h.print_result(dict(rows=[{k: v for k, v in r.items() if k not in ('metrics', 'metrics_finetuned')}
                              for r in all_rows], quick=args.quick, calibration_items=args.calibration_items,
                         **summary))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / 'slim_benchmark.json', 'w') as f:
        json.dump(all_rows, f, indent=1, default=str)


if __name__ == '__main__':
    main()
