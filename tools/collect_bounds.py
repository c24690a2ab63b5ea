#!/usr/bin/env python
"""Measure the fixed-shape bounds of an FSD-lite / FSDv2-lite config on a dataset and print a config snippet.

Runs the **dynamic** model's data path frame by frame (one frame per forward, as deployed) and records what the
static mode would need (``fsdlite.deploy.bound_measure.measure_bounds``: points, voxels per UNet level as spconv's
``record_voxel_count`` does, foreground points per class, clusters and label-propagation iterations /
virtual voxels per mixer level, boxes before NMS), then prints the maxima and ``bounds = dict(...)`` scaled by
``--margin``::

    python tools/collect_bounds.py configs/fsd/fsdlite_synthetic.py --num-frames 50 --checkpoint work.pth

Foreground, cluster and box counts depend on the weights: pass the trained ``--checkpoint`` (without one the
model has random weights and the output says so).  Per-class foreground bounds are capped at the sampler's
``max_per_class`` budget (the static path never selects more).

It also prints, per frame, the fraction of the recommended pre-op bounds (points, voxels per level, rulebook pairs)
it needs -- the capacity tier it would run on when deployed with ``deploy/export_onnx.py --tiers`` -- and suggests
tiers at the median and 90th percentile of those fractions.
"""
import argparse
import math

import torch
from mmengine.utils import ProgressBar

from fsdlite.datasets.from_config import config_batches
from fsdlite.engine.errors import ToolError
from fsdlite.engine.tool_setup import CfgOptionsAction, load_config, load_weights, number, out_file
from fsdlite.deploy.bound_measure import bounds_with_margin, measure_bounds
from fsdlite.registry import MODELS
from fsdlite.structures.bounds import merge_max
from fsdlite.utils.compat import CheckpointLoadError

SPLITS = ('train', 'val', 'test')


def parse_args(argv=None):
    """Command-line options; returns ``(parser, args)``."""
    parser = argparse.ArgumentParser(description='Measure fixed-shape bounds of an FSD-lite / FSDv2-lite config')
    parser.add_argument('config', help='model config (FSDLite / FSDv2Lite) with a dataloader')
    parser.add_argument('--num-frames', type=number(int, 1), default=None, help='frames to measure (default: all)')
    parser.add_argument('--margin', type=number(float, 1), default=1.2,
                        help='factor applied to the measured maxima (>= 1)')
    parser.add_argument('--split', choices=SPLITS, default='val', help='dataloader whose dataset is measured')
    parser.add_argument('--checkpoint', default=None, help='trained weights (default: random weights, seed 0)')
    parser.add_argument('--out', type=out_file, default=None, help='also write the snippet to this file')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction, metavar='KEY=VALUE',
                        help='override config entries, e.g. val_dataloader.dataset.num_frames=10 (keys must exist)')
    return parser, parser.parse_args(argv)


def build_model(cfg, checkpoint):
    """The config's model in dynamic mode (eval), with the checkpoint's weights or seeded random ones."""
    model_cfg = dict(cfg.model.to_dict() if hasattr(cfg.model, 'to_dict') else cfg.model)
    model_cfg.pop('bounds', None)  # measured on the dynamic path; existing bounds play no part
    torch.manual_seed(0)
    model = MODELS.build(model_cfg)
    if not hasattr(model, 'bound_schema'):
        raise ToolError(f'{type(model).__name__} has no fixed-shape bounds (expected FSDLite or FSDv2Lite)')
    if checkpoint is not None:
        load_weights(model, checkpoint, cfg.filename)
    return model.eval()


def tier_fractions(history, bounds, names):
    """Per frame, the largest ``needed / bound`` over the entries of the bounds named in ``names``: the smallest
    capacity tier scale whose bounds (``scale_bounds(bounds, s, names)``) hold the frame."""
    def entries(values):
        return values if isinstance(values, list) else [values]

    return [max(n / b for name in names if name in bounds for n, b in zip(entries(needed[name]), entries(bounds[name])))
            for needed in history]


def suggest_tiers(fractions, step=0.05):
    """Tier scales at the median and 90th percentile of ``fractions``, rounded up to ``step``; those below 1 only."""
    ordered = sorted(fractions)
    picks = [ordered[max(math.ceil(q * len(ordered)) - 1, 0)] for q in (0.5, 0.9)]
    scales = sorted({round(math.ceil(p / step - 1e-9) * step, 4) for p in picks})
    return [s for s in scales if s < 1]


def snippet(bounds):
    """``bounds = dict(...)`` as Python config text."""
    items = ', '.join(f'{k}={v!r}' for k, v in bounds.items())
    return f'bounds = dict({items})'


def collect(model, batches, frames):
    """Measure the preprocessed one-frame ``batches`` (``frames`` of them); returns (maxima, per-frame list of
    needed dicts)."""
    maxima, history = {}, []
    bar = ProgressBar(frames)
    for batch in batches:
        needed = measure_bounds(model, batch['inputs'])
        history.append(needed)
        merge_max(maxima, needed)
        bar.update()
    print()
    return maxima, history


def main(argv=None):
    """Run the tool; returns the recommended bounds dict (set-up errors exit with status 2)."""
    parser, args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
        model = build_model(cfg, args.checkpoint)
        frames = None if args.num_frames is None else range(args.num_frames)
        batches, count = config_batches(cfg, args.split, frames, model=model, what='frames to measure', clip=True)
        maxima, history = collect(model, batches, count)
    except (ToolError, FileNotFoundError, CheckpointLoadError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    bounds = bounds_with_margin(model, maxima, args.margin)
    weights = f'checkpoint {args.checkpoint}' if args.checkpoint else \
        'RANDOM weights (seed 0): foreground / cluster / box counts are not those of a trained model'
    print(f'{type(model).__name__} on {len(history)} frame(s) of {args.split}_dataloader.dataset, {weights}')
    print(f'{"bound":<20}  {"max":<28}  mean')
    for key, value in maxima.items():
        values = [h[key] for h in history]
        if isinstance(value, list):
            mean = [round(sum(v[i] for v in values) / len(values), 1) for i in range(len(value))]
        else:
            mean = round(sum(values) / len(values), 1)
        print(f'{key:<20}  {str(value):<28}  {mean}')
    fractions = tier_fractions(history, bounds, model.bound_schema().tier_scaled())
    tiers = suggest_tiers(fractions)
    ordered = sorted(fractions)
    print(f'needs per frame in the bounds tiers scale, as a fraction of these bounds (its capacity tier): min '
          f'{ordered[0]:.2f}, median {ordered[(len(ordered) - 1) // 2]:.2f}, max {ordered[-1]:.2f}; '
          + (f'suggested: deploy/export_onnx.py ... --tiers {" ".join(f"{t:g}" for t in tiers)}' if tiers else
             'no capacity tier below 1 would help'))
    text = (f'# measured by tools/collect_bounds.py {args.config} on {len(history)} frame(s), margin {args.margin}\n'
            + (f'# capacity tiers for deploy/export_onnx.py: --tiers {" ".join(f"{t:g}" for t in tiers)}\n'
               if tiers else '') + f'{snippet(bounds)}\n')
    print(text, end='')
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text)
    return bounds


if __name__ == '__main__':
    main()
