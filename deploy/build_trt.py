#!/usr/bin/env python
"""Build a TensorRT engine from a deploy folder: ``python deploy/build_trt.py DIR [--fp16]``.

Writes ``DIR/model.engine`` (and ``DIR/model_tier<scale>.engine`` for each capacity tier of the folder) when
TensorRT and a CUDA device exist; otherwise prints why not and exits 0 (the
ONNX graph itself is the deliverable; ONNX Runtime runs it anywhere).  Exit status 1: TensorRT is present but
the build failed; 2: DIR is not a deploy folder.
"""
import argparse
import os.path as osp
import sys

from fsdlite.deploy.runtime import read_deploy_info
from fsdlite.deploy.tensorrt import build_engine, unavailable_reason
from fsdlite.engine.tool_setup import number


def main(argv=None):
    """Run the build; returns the exit status."""
    parser = argparse.ArgumentParser(description='Build a TensorRT engine from a deploy folder (skips without GPU)')
    parser.add_argument('dir', help='folder written by deploy/export_onnx.py')
    parser.add_argument('--fp16', action='store_true', help='allow FP16 kernels')
    parser.add_argument('--workspace-gib', type=number(float, 0, low_open=True), default=4.0,
                        help='builder workspace limit (GiB, > 0)')
    args = parser.parse_args(argv)
    try:
        info = read_deploy_info(args.dir)
    except (FileNotFoundError, ValueError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    reason = unavailable_reason()
    if reason:
        print(f'{parser.prog}: no TensorRT engine built: {reason}')
        return 0
    for graph in [info['onnx']] + [tier['onnx'] for tier in info.get('tiers', [])]:
        onnx_path = osp.join(args.dir, graph)
        engine_path = osp.splitext(onnx_path)[0] + '.engine'
        try:
            size = build_engine(onnx_path, engine_path, args.fp16, args.workspace_gib)
        except RuntimeError as exc:
            print(f'{parser.prog}: TensorRT build failed: {exc}', file=sys.stderr)
            return 1
        print(f'wrote {engine_path} ({size / 2**20:.1f} MiB, workspace limit {args.workspace_gib:g} GiB)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
