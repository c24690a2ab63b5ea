#!/usr/bin/env python
"""Run a trained detector on your own point files: a BEV PNG, a JSON and KITTI result lines per frame.

    python tools/infer.py CONFIG CHECKPOINT PATH.bin|FOLDER --out DIR [--calib FILE|DIR] [--device cpu]

Each ``.bin`` (float32 x, y, z, reflectance, ... as the config's dataset reads them) gives ``DIR/<name>.png``,
``DIR/<name>.json`` (lidar boxes, scores, class names, counts) and ``DIR/<name>.txt`` (KITTI result lines, as
KITTI's evaluation reads them). The camera calibration of a frame is ``--calib`` (one KITTI calib file, or a
folder of ``<name>.txt``), else ``../calib/<name>.txt`` beside a KITTI ``velodyne`` folder, else KITTI's nominal
calibration (said in the JSON). With a frame's own calibration the points outside the camera's view are dropped
first (``--camera-fov auto``, as the KITTI configs train); ``on`` / ``off`` force it.
"""
import argparse
import json
import os
import os.path as osp
import sys

from fsdlite.apis import frame_points, inference_detector, init_model
from fsdlite.datasets.kitti_format import lidar2cam_from_calib, read_calib, result_lines
from fsdlite.engine.errors import ToolError
from fsdlite.engine.tool_setup import CfgOptionsAction, number, out_dir
from fsdlite.structures.camera import KITTI_IMAGE_SIZE, KITTI_NOMINAL_CALIB, lidar2img_from_calib
from fsdlite.utils.compat import CheckpointLoadError
from fsdlite.visualization.bev import draw_bev


def parse_args(argv=None):
    """Command-line options; returns ``(parser, args)``."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', help='detector config')
    parser.add_argument('checkpoint', help='its trained weights')
    parser.add_argument('path', help='a .bin point file or a folder of them')
    parser.add_argument('--out', type=out_dir, required=True, help='output folder')
    parser.add_argument('--calib', default=None, help='KITTI calib file, or a folder of <name>.txt calib files')
    parser.add_argument('--camera-fov', choices=('auto', 'on', 'off'), default='auto',
                        help="drop points outside the camera's view (auto: when the frame has its own calib)")
    parser.add_argument('--device', default='cpu', help="'cpu' or 'cuda'")
    parser.add_argument('--draw-thr', type=number(float, 0, 1), default=0.3,
                        help='draw predicted boxes scoring at least this (all are written to JSON / KITTI lines)')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction, metavar='KEY=VALUE',
                        help='override config entries')
    return parser, parser.parse_args(argv)


def point_files(path):
    """Sorted ``.bin`` files of a file or folder argument."""
    if osp.isfile(path):
        if not path.endswith('.bin'):
            raise ToolError(f'{path!r} is not a .bin point file (float32 x, y, z, reflectance, ...)')
        return [path]
    if not osp.isdir(path):
        raise FileNotFoundError(f'{path!r} is neither a .bin file nor a folder')
    files = sorted(osp.join(path, n) for n in os.listdir(path) if n.endswith('.bin'))
    if not files:
        raise ToolError(f'folder {path!r} holds no .bin point files')
    return files


def frame_calib(bin_path, calib_arg):
    """``(calib dict of 4x4 matrices, source)`` of a frame (see the module docstring)."""
    name = osp.splitext(osp.basename(bin_path))[0]
    if calib_arg:
        candidate = osp.join(calib_arg, f'{name}.txt') if osp.isdir(calib_arg) else calib_arg
        if not osp.isfile(candidate):
            raise FileNotFoundError(f'--calib: no calib file {candidate!r} for {bin_path!r}')
        return read_calib(candidate), candidate
    sibling = osp.join(osp.dirname(osp.dirname(osp.abspath(bin_path))), 'calib', f'{name}.txt')
    if osp.isfile(sibling):
        return read_calib(sibling), sibling
    return KITTI_NOMINAL_CALIB, 'nominal'


def infer_file(model, bin_path, args, classes):
    """Detect, then write the frame's PNG, JSON and KITTI lines; returns the JSON summary."""
    name = osp.splitext(osp.basename(bin_path))[0]
    calib, source = frame_calib(bin_path, args.calib)
    if 'P2' not in calib:
        raise ToolError(f'calib {source!r} has no P2 (the left colour camera projection)')
    lidar2img, lidar2cam = lidar2img_from_calib(calib), lidar2cam_from_calib(calib)
    crop = args.camera_fov == 'on' or (args.camera_fov == 'auto' and source != 'nominal')
    points, info = frame_points(model, bin_path, lidar2img if crop else None)
    result = inference_detector(model, points)
    pred = result.pred_instances_3d
    boxes, scores, labels = pred.bboxes_3d.cpu(), pred.scores_3d.cpu(), pred.labels_3d.cpu()
    names = [classes[int(i)] for i in labels]
    lines, kept = result_lines(names, boxes, scores, lidar2cam, lidar2img, KITTI_IMAGE_SIZE)
    with open(osp.join(args.out, f'{name}.txt'), 'w') as f:
        f.write(''.join(line + '\n' for line in lines))
    summary = dict(file=bin_path, calib=source, camera_fov=crop, boxes_3d=boxes.tolist(), scores=scores.tolist(),
                   labels=names, num_detections=len(names), num_outside_image=int((~kept).sum()),
                   num_points=len(points), num_points_out_of_view=info['num_points_out_of_view'],
                   num_points_invalid=info['num_points_invalid'])
    with open(osp.join(args.out, f'{name}.json'), 'w') as f:
        json.dump(summary, f, indent=1)
    keep = scores >= args.draw_thr
    draw_bev(osp.join(args.out, f'{name}.png'), points, classes,
             pred_boxes=boxes[keep], pred_box_labels=labels[keep], pred_box_scores=scores[keep],
             point_range=model.cfg.model.get('point_range'), point_size=0.8,
             title=f'{name}: {int(keep.sum())} detections scoring >= {args.draw_thr:g} ({len(names)} in all)')
    return summary


def main(argv=None):
    """Run the tool; returns the per-frame summaries (set-up errors exit with status 2 and one line)."""
    parser, args = parse_args(argv)
    try:
        files = point_files(args.path)
        os.makedirs(args.out, exist_ok=True)
        model = init_model(args.config, args.checkpoint, args.device, args.cfg_options)
        classes = model.dataset_meta['classes']
        summaries = []
        for path in files:
            summary = infer_file(model, path, args, classes)
            summaries.append(summary)
            print(f"{osp.basename(path)}: {summary['num_detections']} detections "
                  f"({sum(s >= args.draw_thr for s in summary['scores'])} scoring >= {args.draw_thr:g}); "
                  f"calib {summary['calib']}", flush=True)
    except (ToolError, FileNotFoundError, CheckpointLoadError, ValueError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    print(f'wrote {len(files)} frames to {args.out}')
    return summaries


if __name__ == '__main__':
    sys.exit(0 if main() is not None else 1)
