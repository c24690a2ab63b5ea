#!/usr/bin/env python
"""Train a model from a config (the interface of mmdetection3d's ``tools/train.py``).

Examples::

    python tools/train.py configs/segmentation/sparse_segmentor_synthetic.py --work-dir work_dirs/seg
    python tools/train.py CONFIG --cfg-options train_cfg.max_iters=4 --resume            # latest checkpoint
    python tools/train.py CONFIG --cfg-options load_from=other.pth --partial-load       # matching weights only
    torchrun --nproc-per-node 2 tools/train.py CONFIG --launcher pytorch                  # gloo on CPU
"""
import argparse

from fsdlite.engine.distributed import shutdown_distributed
from fsdlite.engine.errors import ToolError
from fsdlite.engine.tool_setup import (CheckpointMismatchError, add_runner_args, build_runner,
                                       check_schedule, enable_amp, latest_checkpoint, load_config, load_weights,
                                       parse_runner_args, prepare_runner_cfg, require_file, runner_model)
from fsdlite.utils.compat import CheckpointLoadError


def parse_args(argv=None):
    """Command-line options; returns ``(parser, args)``."""
    parser = argparse.ArgumentParser(description='Train a model from a config')
    parser.add_argument('config', help='config file')
    add_runner_args(parser, 'folder for logs and checkpoints (default: work_dirs/<config name>)',
                    'train_cfg.max_iters=100')
    parser.add_argument('--amp', action='store_true', help='automatic mixed precision (CUDA only)')
    parser.add_argument('--resume', nargs='?', const='auto', default=None, metavar='PATH',
                        help='resume from PATH, or from the latest checkpoint in the work dir when no PATH is given')
    parser.add_argument('--partial-load', action='store_true',
                        help='load a load_from checkpoint non-strictly, copying only the weights whose names and '
                             'shapes match (default: a checkpoint of another config is an error)')
    args = parse_runner_args(parser, argv)
    return parser, args


def check_resume(runner, path, config):
    """Fail before training when the ``--resume`` checkpoint belongs to another config or holds no training state
    (mmengine would load it non-strictly, or fail with ``KeyError: 'meta'``)."""
    ckpt = load_weights(runner_model(runner), path, config, '--resume checkpoint')
    meta = ckpt.get('meta')
    if not isinstance(meta, dict) or not {'iter', 'epoch'} <= set(meta):
        raise CheckpointMismatchError(
            f"--resume checkpoint {path!r} holds no training state ('meta' with 'iter' and 'epoch'); expected a "
            'checkpoint written by tools/train.py (to start from its weights: --cfg-options load_from=PATH)')


def main(argv=None):
    """Run the tool; set-up errors exit with status 2 and a one-line message."""
    parser, args = parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options, args.allow_new_cfg_keys)
        prepare_runner_cfg(cfg, args.config, args.work_dir, args.launcher)
        check_schedule(cfg)
        if args.amp:
            enable_amp(cfg)
        if args.resume == 'auto':
            latest_checkpoint(cfg.work_dir)  # a damaged last_checkpoint file is an error, not a traceback
            cfg.resume, cfg.load_from = True, None
        elif args.resume is not None:
            cfg.resume, cfg.load_from = True, require_file(args.resume, '--resume checkpoint')
        runner = build_runner(cfg, strict_load=not args.partial_load)
        if args.resume not in (None, 'auto'):
            check_resume(runner, args.resume, args.config)
        runner.train()
    except (ToolError, FileNotFoundError, CheckpointLoadError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    finally:
        shutdown_distributed()


if __name__ == '__main__':
    main()
