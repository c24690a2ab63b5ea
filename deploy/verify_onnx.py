#!/usr/bin/env python
"""Verify a deploy folder: the deployed pipeline (pre-ops -> ONNX Runtime -> post-ops) against PyTorch.

    python deploy/verify_onnx.py DIR [--checkpoint PATH] [--data-root DIR]

Detectors run on the real frames present (KITTI 000008, the nuScenes keyframe, spconv's 198k-point Waymo-range
frame); VoxelNet and KPConv on the config's synthetic test/val data.  Prints, per input, the max abs/rel
difference of every graph output (ONNX Runtime vs the same graph in PyTorch) and whether the final predictions
match the eager PyTorch model (detections after NMS, labels).  A difference that a discrete decision flipped on a
near-tie explains (a score on score_thr, a foreground point at its threshold or budget cut-off, an NMS IoU at its
threshold: fsdlite.deploy.decisions) passes and is printed with its margin.  Exit status: 0 all verified, 1 an
unexplained difference beyond tolerance or mismatch (inputs that exceed a bound are reported, not failed), 2 a
set-up error or an unusable
deploy folder (a missing or corrupt model.onnx, a config.py that does not parse: one ``error:`` line), 3 an
unexpected failure while verifying (with its traceback) -- never the status of a numeric mismatch.
"""
import argparse
import sys
import traceback

from fsdlite.deploy.verify import format_checks, verify_deploy
from fsdlite.engine.errors import ToolError
from fsdlite.engine.tool_setup import in_dir, number
from fsdlite.utils.compat import CheckpointLoadError


def main(argv=None):
    """Run the verification; returns the exit status."""
    parser = argparse.ArgumentParser(description='Verify a deploy folder against PyTorch on real/synthetic inputs')
    parser.add_argument('dir', help='folder written by deploy/export_onnx.py')
    parser.add_argument('--checkpoint', default=None, help='weights (default: the one recorded in deploy.json)')
    parser.add_argument('--data-root', type=in_dir, default=None,
                        help='folder of the real frames (default ../shared/data)')
    parser.add_argument('--threads', type=number(int, 1), default=1, help='ONNX Runtime intra-op threads')
    args = parser.parse_args(argv)
    try:
        checks = verify_deploy(args.dir, args.checkpoint, args.data_root, threads=args.threads)
    except (ToolError, FileNotFoundError, ValueError, KeyError, CheckpointLoadError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    except Exception:  # noqa: BLE001 -- an internal failure must not read as a numeric mismatch (1)
        traceback.print_exc()
        print(f'{parser.prog}: internal error while verifying (traceback above); exit status 3', file=sys.stderr)
        return 3
    print(format_checks(checks))
    return 0 if all(c.ok for c in checks) else 1


if __name__ == '__main__':
    sys.exit(main())
