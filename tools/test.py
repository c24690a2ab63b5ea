#!/usr/bin/env python
"""Evaluate a checkpoint on a config's test set (the interface of mmdetection3d's ``tools/test.py``).

Example::

    python tools/test.py configs/segmentation/sparse_segmentor_synthetic.py work_dirs/seg/iter_2000.pth
"""
import argparse

from fsdlite.engine.errors import ToolError
from fsdlite.engine.tool_setup import (add_runner_args, build_runner, load_config, load_weights,
                                       parse_runner_args, prepare_runner_cfg, require_file, runner_model)
from fsdlite.utils.compat import CheckpointLoadError


def parse_args(argv=None):
    """Command-line options; returns ``(parser, args)``."""
    parser = argparse.ArgumentParser(description='Test (evaluate) a checkpoint')
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    add_runner_args(parser, 'folder for the evaluation logs (default: work_dirs/<config name>)',
                    'test_dataloader.batch_size=1')
    args = parse_runner_args(parser, argv)
    return parser, args


def main(argv=None):
    """Run the tool; set-up errors exit with status 2 and a one-line message."""
    parser, args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options, args.allow_new_cfg_keys)
        prepare_runner_cfg(cfg, args.config, args.work_dir, args.launcher)
        require_file(args.checkpoint, 'checkpoint')  # before the runner builds the datasets
        cfg.load_from, cfg.resume = None, False  # loaded below, strictly (mmengine's load_from is not strict)
        runner = build_runner(cfg)
        load_weights(runner_model(runner), args.checkpoint, args.config)
        metrics = runner.test()
    except (ToolError, FileNotFoundError, CheckpointLoadError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    return metrics


if __name__ == '__main__':
    main()
