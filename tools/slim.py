#!/usr/bin/env python
"""Slim a trained model: fewer channels per stage and/or fewer blocks, weights taken from the checkpoint.

    python tools/slim.py CONFIG CHECKPOINT --width 0.5 [--depth STAGE=N ...] [--keep-ratio-per-stage PATH=R ...]
                         [--finetune ITERS [--finetune-lr LR] [--finetune-distill MODULE]] --out DIR

Writes ``DIR/<name>_slim.py`` (inherits CONFIG through ``_base_``, overriding only per-stage channel/depth
entries), ``DIR/<name>_slim.pth`` (``strict=True`` loadable), with ``--finetune`` also
``DIR/<name>_slim_finetuned.pth``, and the cost report ``DIR/<name>_slim_report.{txt,json}`` (parameters,
multiply-accumulates from the real sparse-conv rulebooks, CPU latency and peak memory of both models on the
sample). With ``--finetune-distill MODULE`` the original model (CONFIG, CHECKPOINT) teaches the slim model the
outputs of that submodule during the fine-tune (``seg_head`` for FSD-lite; :mod:`fsdlite.slim.distill`; no gain
on the exactly labelled synthetic frames, see docs/benchmarks.md). Stage names are dotted model-config
paths, e.g. ``backbone.encoder_channels.2=1`` or ``backbone.blocks.3=1``; ``--keep-ratio-per-stage
backbone.channels.3=0.25`` overrides ``--width`` there.
"""
import argparse
import importlib.util
import json
import os
import os.path as osp

from fsdlite.engine.errors import ToolError
from fsdlite.engine.tool_setup import CfgOptionsAction, number, out_dir
from fsdlite.slim.errors import SlimError
from fsdlite.utils.compat import CheckpointLoadError

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


def _pairs(values, what, cast):
    out = {}
    for item in values or []:
        key, sep, value = item.partition('=')
        if not sep or not key:
            raise SlimError(f'{what} expects STAGE=VALUE, got {item!r}')
        try:
            out[key] = cast(value)
        except ValueError:
            raise SlimError(f'{what} {key}: {value!r} is not a valid {cast.__name__}') from None
    return out


def parse_args(argv=None):
    """Command-line options; returns ``(parser, args)``."""
    p = argparse.ArgumentParser(description='Channel/depth slimming with weight transfer')
    p.add_argument('config', help='config file of the trained model')
    p.add_argument('checkpoint', help="its checkpoint ('none': the freshly initialised model, for trials)")
    p.add_argument('--width', type=float, default=1.0, help='kept ratio of every channel width, in (0, 1]')
    p.add_argument('--depth', nargs='+', metavar='STAGE=N', help='blocks kept in a stage (dotted config path)')
    p.add_argument('--keep-ratio-per-stage', nargs='+', metavar='PATH=R', help='width ratio under a config path')
    p.add_argument('--divisor', type=int, default=1, help='round slimmed widths to multiples of this')
    p.add_argument('--finetune', type=int, default=0, metavar='ITERS',
                   help="fine-tune the slimmed model for ITERS iterations of the config's (rescaled) schedule")
    p.add_argument('--finetune-lr', type=number(float, 0, low_open=True), metavar='LR',
                   help="peak learning rate of the fine-tune (default: the config's; benchmarks/slim.py's docstring "
                        'compares two for FSD-lite)')
    p.add_argument('--finetune-distill', metavar='MODULE',
                   help='during the fine-tune the original teaches the outputs of this submodule, e.g. seg_head for '
                        'FSD-lite (it must define distill_loss)')
    p.add_argument('--distill-weight', type=number(float, 0, low_open=True), default=1.0, metavar='W',
                   help='factor on the distillation losses (default 1)')
    p.add_argument('--out', type=out_dir, required=True, help='output folder')
    p.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction, metavar='KEY=VALUE',
                   help='override config entries (kept in the written config)')
    p.add_argument('--sample-index', nargs='+', type=number(int, 0), default=[0],
                   help='dataset items of the sample batch')
    p.add_argument('--split', default='val', choices=('train', 'val', 'test'), help='dataloader of the sample')
    p.add_argument('--calibration-items', type=number(int, 0), default=0, metavar='N',
                   help='compensate dropped input channels by least squares on the original\'s activations over the '
                        'first N training items (0: plain slicing)')
    p.add_argument('--latency-repeat', type=number(int, 1), default=5, help='timed forwards per model (median)')
    p.add_argument('--no-memory', action='store_true', help='skip the peak-memory subprocess measurements')
    return p, p.parse_args(argv)


def _memory_probe(args, paths):
    """name -> peak bytes of one predict forward in a fresh process (benchmarks/_harness.run_isolated with the worker
    benchmarks/forward_worker.py, both loaded from their files)."""
    spec = importlib.util.spec_from_file_location('_harness', osp.join(REPO_ROOT, 'benchmarks', '_harness.py'))
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    worker = osp.join(REPO_ROOT, 'benchmarks', 'forward_worker.py')

    def probe(name):
        config, ckpt, options = paths[name]
        res = harness.run_isolated(worker, 'forward_work', dict(config=config, checkpoint=ckpt, cfg_options=options,
                                                                sample_indices=args.sample_index, split=args.split))
        return res['peak_bytes'] if res['ok'] else float('nan')
    return probe


def main(argv=None):
    """Run the tool; bad requests exit with status 2 and a one-line message."""
    parser, args = parse_args(argv)
    from fsdlite.slim.api import cost_report, format_report, slim_config
    from fsdlite.slim.distill import distill_module
    from fsdlite.slim.engine import SlimRequest
    from fsdlite.slim.finetune import finetune
    try:
        request = SlimRequest(width=args.width, depth=_pairs(args.depth, '--depth', int),
                              ratios=_pairs(args.keep_ratio_per_stage, '--keep-ratio-per-stage', float),
                              divisor=args.divisor).validate()
        if args.finetune < 0:
            raise SlimError(f'--finetune {args.finetune}: expected a number of iterations >= 0')
        ckpt = None if args.checkpoint.lower() == 'none' else args.checkpoint
        if args.finetune_distill and (not args.finetune or ckpt is None):
            raise SlimError(f'--finetune-distill {args.finetune_distill}: needs --finetune ITERS and a trained '
                            f'checkpoint (got --finetune {args.finetune}, checkpoint {args.checkpoint!r})')
        options = dict(args.cfg_options or {})
        out = slim_config(args.config, ckpt, request, args.out, options, args.sample_index, args.split, log=print,
                          calibration=args.calibration_items)
        distill = None
        if args.finetune_distill:
            distill_module(out.slim_model, args.finetune_distill)
            distill = dict(teacher_config=osp.abspath(args.config), teacher_checkpoint=ckpt,
                           module=args.finetune_distill, weight=args.distill_weight, teacher_options=options or None)
    except (SlimError, ToolError, FileNotFoundError, CheckpointLoadError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    res = out.result
    print(f'slimmed config: {out.config_path}\nslimmed weights: {out.checkpoint_path} (loads with strict=True)')
    for name, old, new, kind in res.changes:
        print(f'  {name}: {old} -> {new} ({kind})')
    for note in res.notes:
        print(f'  note: {note}')
    for layer, width, kept, unexplained in res.compensation:
        print(f'  compensated {layer}: {width} -> {kept} inputs, {unexplained:.1%} of the dropped inputs unexplained')
    if out.identical is not None:
        print(f'  identity request: outputs identical to the original (max difference {out.identical})')
    paths = dict(original=(osp.abspath(args.config), ckpt, options), slim=(out.config_path, out.checkpoint_path, None))
    memory = None if args.no_memory else _memory_probe(args, paths)
    costs = cost_report(dict(original=out.model, slim=out.slim_model), out.data, memory, args.latency_repeat)
    report = dict(config=args.config, checkpoint=ckpt, slim_config=out.config_path,
                  slim_checkpoint=out.checkpoint_path, request=vars(request), changes=[list(c) for c in res.changes],
                  dropped_layers=res.dropped, bridged=res.bridged, notes=res.notes, cost=costs,
                  compensation=[list(c) for c in res.compensation],
                  layers=[list(x) for x in res.layers])
    name = osp.splitext(osp.basename(args.config))[0]
    if args.finetune:
        work = osp.join(args.out, 'finetune')
        final = finetune(out.config_path, out.checkpoint_path, args.finetune, work, lr=args.finetune_lr,
                         distill=distill)
        tuned = osp.join(args.out, f'{name}_slim_finetuned.pth')
        os.replace(final, tuned)
        report['finetuned_checkpoint'] = tuned
        print(f'fine-tuned weights: {tuned}')
    table = format_report(costs)
    print(table)
    with open(osp.join(args.out, f'{name}_slim_report.txt'), 'w') as f:
        f.write(table + '\n')
    with open(osp.join(args.out, f'{name}_slim_report.json'), 'w') as f:
        json.dump(report, f, indent=1, default=str)
    return report


if __name__ == '__main__':
    main()
