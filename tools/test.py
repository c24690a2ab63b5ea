#!/usr/bin/env python
"""Evaluate a checkpoint on a config's test set (the interface of mmdetection3d's ``tools/test.py``).

Example::

    python tools/test.py configs/segmentation/sparse_segmentor_synthetic.py work_dirs/seg/iter_2000.pth

``--fixed-shape`` evaluates a detector's fixed-shape run instead (pre-ops, the fixed-shape forward, NMS; the bounds of
the config, e.g. ``configs/fsd/fsdlite_kitti_static.py``): what an exported graph computes.
"""
import argparse

from fsdlite.deploy.fixed_shape import FixedShapeDetector
from fsdlite.engine.errors import ToolError
from fsdlite.engine.tool_setup import (add_runner_args, build_runner, load_config, load_weights,
                                       parse_runner_args, prepare_runner_cfg, require_file, runner_model)
from fsdlite.utils.compat import CheckpointLoadError


def parse_args(argv=None):
    """Command-line options; returns ``(parser, args)``."""
    parser = argparse.ArgumentParser(description='Test (evaluate) a checkpoint')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--fixed-shape', action='store_true',
                        help='evaluate the fixed-shape run of an FSD-lite / FSDv2-lite config with bounds')
    add_runner_args(parser, 'folder for the evaluation logs (default: work_dirs/<config name>)',
                    'test_dataloader.batch_size=1')
    args = parse_runner_args(parser, argv)
    return parser, args


def fixed_shape_model(runner, args):
    """The runner's detector wrapped so that its predictions come from the fixed-shape run (one process only)."""
    model = runner_model(runner)
    if args.launcher != 'none':
        raise ToolError('--fixed-shape evaluates in one process; run it without --launcher')
    if getattr(model, 'bounds', None) is None or not hasattr(model, 'forward_static'):
        raise ToolError(f'--fixed-shape needs a detector config with bounds (e.g. configs/fsd/fsdlite_kitti_static.py); '
                        f'{args.config} builds {type(model).__name__} without them')
    return FixedShapeDetector(model)


def main(argv=None):
    """Run the tool; set-up errors exit with status 2 and a one-line message."""
    parser, args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options, args.allow_new_cfg_keys)
        prepare_runner_cfg(cfg, args.config, args.work_dir, args.launcher)
        require_file(args.checkpoint, 'checkpoint')  # before the runner builds the datasets
        cfg.load_from, cfg.resume = None, False  # loaded below, strictly (mmengine's load_from is not strict)
        runner = build_runner(cfg)
        fixed = fixed_shape_model(runner, args) if args.fixed_shape else None
        load_weights(runner_model(runner), args.checkpoint, args.config)
        if fixed is not None:
            runner.model = fixed  # the same detector (weights loaded), predicting through the fixed-shape run
        metrics = runner.test()
    except (ToolError, FileNotFoundError, CheckpointLoadError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    return metrics


if __name__ == '__main__':
    main()
