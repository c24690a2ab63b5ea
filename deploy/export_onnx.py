#!/usr/bin/env python
"""Export a config of any family (FSD-lite / FSDv2-lite, VoxelNet, KPFCNN) to a fixed-shape plain-ONNX deploy folder.

    python deploy/export_onnx.py CONFIG CHECKPOINT --out DIR [--bounds FILE] [--batch-size B] [--tiers S ...]

Writes ``DIR/model.onnx`` (opset >= 18, standard ONNX ops only, static shapes; the export fails when a custom
domain, a data-dependent op such as NonZero/Unique, or a dynamic shape appears), ``DIR/deploy.json`` (bounds,
inputs/outputs and their meaning, what runs outside the graph), ``DIR/config.py`` and ``DIR/report.md``, and
prints the report.  CHECKPOINT may be ``random`` (seeded random weights, for smoke tests).  Bounds: ``--bounds``
(JSON or ``tools/collect_bounds.py --out`` snippet) > the config's ``model.bounds`` > measured on the family's
frames with ``--margin``.  ``--tiers 0.4 0.6`` also writes capacity-tier graphs (detectors: the pre-op bounds
times each scale; the runtime runs each frame on the smallest tier it fits, fsdlite.deploy.tiers).
Exit status: 0 deployable, 1 graph not deployable or ORT differs, 2 set-up error.
"""
import argparse
import sys

from fsdlite.deploy import DeployGraphError, export_model
from fsdlite.deploy.onnx_io import DEFAULT_OPSET
from fsdlite.engine.errors import ToolError
from fsdlite.engine.tool_setup import CfgOptionsAction, in_dir, number, out_dir
from fsdlite.utils.compat import CheckpointLoadError


def parse_args(argv=None):
    """Command-line options; returns ``(parser, args)``."""
    parser = argparse.ArgumentParser(description='Export a fsdlite config to a fixed-shape plain-ONNX deploy folder')
    parser.add_argument('config', help='model config (FSDLite, FSDv2Lite, VoxelNet, KPFCNN)')
    parser.add_argument('checkpoint', help='weights file, or "random" for seeded random weights')
    parser.add_argument('--out', type=out_dir, required=True, help='output folder')
    parser.add_argument('--bounds', default=None, help='bounds file (JSON or "bounds = dict(...)")')
    parser.add_argument('--batch-size', type=number(int, 1), default=1, help='batch size fixed in the graph')
    parser.add_argument('--margin', type=number(float, 1), default=1.5, help='factor on measured bounds (>= 1)')
    parser.add_argument('--data-root', type=in_dir, default=None,
                        help='folder of the real frames (default ../shared/data)')
    parser.add_argument('--opset', type=number(int, DEFAULT_OPSET), default=DEFAULT_OPSET,
                        help=f'ONNX opset (>= {DEFAULT_OPSET}: ScatterElements max/min)')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction, metavar='KEY=VALUE',
                        help='override config entries (keys must exist), e.g. model.backbone.channels="(8,16)"')
    parser.add_argument('--tiers', type=float, nargs='+', default=(), metavar='SCALE',
                        help='capacity tiers: also export graphs with the pre-op bounds times each SCALE in (0, 1)')
    parser.add_argument('--verbose', action='store_true', help="show the ONNX exporter's messages")
    return parser, parser.parse_args(argv)


def main(argv=None):
    """Run the export; returns the exit status."""
    parser, args = parse_args(argv)
    try:
        result = export_model(args.config, args.checkpoint, args.out, args.bounds, args.cfg_options,
                              args.batch_size, args.margin, args.data_root, opset=args.opset, verbose=args.verbose,
                              tiers=args.tiers)
    except DeployGraphError as exc:
        print(f'{parser.prog}: NOT DEPLOYABLE ({args.out}/report.md): {exc}', file=sys.stderr)
        return 1
    except (ToolError, FileNotFoundError, ValueError, KeyError, CheckpointLoadError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    print((result.out_dir / 'report.md').read_text())
    bad = [d.name for d in result.diffs if not d.ok]
    bad += [f'{t.entry["onnx"]}:{d.name}' for t in result.tiers for d in t.diffs if not d.ok]
    if bad:
        print(f'{parser.prog}: ONNX Runtime differs from PyTorch beyond tolerance on {bad}', file=sys.stderr)
        return 1
    tiers = ''.join(f'{t.entry["onnx"]}, ' for t in result.tiers)
    print(f'wrote {result.out_dir}/model.onnx, {tiers}deploy.json, config.py, report.md')
    return 0


if __name__ == '__main__':
    sys.exit(main())
