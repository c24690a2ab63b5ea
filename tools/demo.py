#!/usr/bin/env python
"""``make demo``: train FSD-lite on the simulated KITTI world, then tell the truth about real data.

    python tools/demo.py [--config CONFIG] [--out-dir demo_out] [--max-iters N] [--threads T] [--kitti-root DIR]

Trains on simulated street frames (validating on held-out simulated frames during training), then evaluates the
model on the 30 real KITTI frames of ``../shared/data/kitti_tiny_3d`` (full scans cropped to the camera's view,
KITTI's own scoring, moderate) and prints both side by side; draws BEV pictures of two simulated and two real
frames with ground-truth and predicted boxes, and the training curves (losses; AP at each validation).

Any simulated-world config works: a detector (``pred_instances_3d``: AP table, boxes in the pictures) or the
SparseSegmentor (``configs/segmentation/sparse_segmentor_synthetic.py``: per-class IoU, point labels).

Everything it writes goes to ``--out-dir`` (checkpoints and logs in ``<out-dir>/work``).
"""
import argparse
import json
import math
import os
import os.path as osp
import time

import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.utils import ProgressBar

from fsdlite.apis import predict_item, score_samples
from fsdlite.engine.averaged_weights import use_averaged_weights
from fsdlite.engine.errors import ToolError
from fsdlite.engine.schedule import rescale_schedule
from fsdlite.engine.tool_setup import (CfgOptionsAction, build_runner, check_schedule, in_dir, load_config, number,
                                       out_dir, prepare_runner_cfg)
from fsdlite.registry import DATASETS
from fsdlite.visualization.bev import draw_bev
from fsdlite.visualization.curves import draw_training_curves

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
DEFAULT_CONFIG = 'configs/fsd/fsdlite_synthetic.py'
KITTI_CONFIG = 'configs/_base_/datasets/kitti_tiny.py'
REAL_FRAMES = 'ImageSets/trainval.txt'
NUM_VALIDATIONS = 3
# The headline number and its target, by the kind of model: detectors report Car BEV AP@0.5 on the real frames
# (KITTI scoring, moderate), segmentors Car IoU on them.
HEADLINE = {'det': ('Car_BEV_AP@0.5', 'Car BEV AP@0.5 (moderate)', 0.5), 'seg': ('IoU_Car', 'Car IoU', 0.3)}
CURVE_KEYS = {'det': ('det/Car_BEV_AP@0.5', 'det/Car_BEV_AP@0.7', 'det/Car_3D_AP@0.7', 'det/BEV_mAP'),
              'seg': ('seg/IoU_Car', 'seg/mIoU')}


def parse_args(argv=None):
    """Command-line options of the demo; returns ``(parser, args)``."""
    parser = argparse.ArgumentParser(description='fsdlite demo: simulated training, real KITTI evaluation, pictures')
    parser.add_argument('--config', default=DEFAULT_CONFIG,
                        help='simulated-world detector or segmentor config to train')
    parser.add_argument('--out-dir', type=out_dir, default='demo_out',
                        help='folder for PNGs, results.json and the work dir')
    parser.add_argument('--max-iters', type=number(int, 1), default=None,
                        help='training iterations (default: the config)')
    parser.add_argument('--threads', type=number(int, 1), default=min(2, os.cpu_count() or 1),
                        help='torch intra-op threads once the data worker has simulated every training frame '
                        '(one thread before that, so the worker has a core of its own; default: 2 where the '
                        'machine has them)')
    parser.add_argument('--min-box-score', type=number(float, 0, 1), default=0.3,
                        help='draw predicted boxes at or above this score (the title counts the others)')
    parser.add_argument('--kitti-root', type=in_dir, default=None, help='KITTI folder with velodyne/, label_2/, '
                        'calib/ and ImageSets/trainval.txt (default: ../shared/data/kitti_tiny_3d)')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction, metavar='KEY=VALUE',
                        help='override config entries (keys must exist)')
    return parser, parser.parse_args(argv)


class Timer:
    """Wall and process-CPU seconds of named phases."""

    def __init__(self):
        self.phases = {}

    def __call__(self, name):
        timer = self

        class _Phase:
            def __enter__(self):
                self.wall, self.cpu = time.perf_counter(), time.process_time()
                print(f'\n=== {name} ===', flush=True)

            def __exit__(self, *exc):
                timer.phases[name] = (time.perf_counter() - self.wall, time.process_time() - self.cpu)

        return _Phase()


def task_of(sample):
    """'det' when the model predicts boxes (``pred_instances_3d``), else 'seg' (per-point labels)."""
    return 'det' if 'pred_instances_3d' in sample else 'seg'


def bev(out_dir, name, points, sample, classes, point_range, title, min_box_score=0.0):
    """BEV PNG of one frame: GT boxes (and GT point labels when present) beside the predictions; predicted boxes
    scoring below ``min_box_score`` are not drawn and the title says how many were left out."""
    gt = sample.gt_pts_seg.get('pts_semantic_mask') if 'gt_pts_seg' in sample else None
    boxes = sample.gt_instances_3d if 'gt_instances_3d' in sample else None
    kwargs = dict(gt_boxes=boxes.bboxes_3d if boxes is not None else None,
                  gt_box_labels=boxes.labels_3d if boxes is not None else None)
    if task_of(sample) == 'det':
        pred = sample.pred_instances_3d
        keep = pred.scores_3d >= min_box_score
        kwargs.update(pred_boxes=pred.bboxes_3d[keep], pred_box_labels=pred.labels_3d[keep],
                      pred_box_scores=pred.scores_3d[keep])
        title += (f'\npredicted boxes with score >= {min_box_score:g}: {int(keep.sum())} drawn, '
                  f'{int((~keep).sum())} below not drawn')
    else:
        kwargs.update(gt_labels=gt, pred_labels=sample.pred_pts_seg.pts_semantic_mask,
                      pred_scores=sample.pred_pts_seg.pts_scores)
    return draw_bev(osp.join(out_dir, name), points, classes, point_range=point_range, title=title,
                    point_size=0.8, **kwargs)


def kitti_dataset(args, cfg):
    """The real KITTI frames (``ImageSets/trainval.txt``, camera view) through the config's test pipeline, or
    ``(None, reason)``."""
    kcfg = Config.fromfile(osp.join(REPO_ROOT, KITTI_CONFIG))
    root = args.kitti_root or kcfg.data_root
    root = root if osp.isabs(root) else osp.join(REPO_ROOT, root)
    if not osp.isfile(osp.join(root, REAL_FRAMES)):
        return None, f'{osp.join(root, REAL_FRAMES)} not found'
    dataset = DATASETS.build(dict(kcfg.test_dataloader.dataset, data_root=root, ann_file=REAL_FRAMES,
                                  metainfo=dict(cfg.test_dataloader.dataset.metainfo),
                                  pipeline=cfg.test_dataloader.dataset.pipeline))
    return dataset, None


def busiest_frames(dataset, count=2):
    """Indices of the ``count`` frames with the most labelled target objects (ties: the earlier frame)."""
    sizes = [len(dataset.get_data_info(i)['gt_labels_3d']) for i in range(len(dataset))]
    return sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))[:count]


class ThreadsAfterSimulation(Hook):
    """One torch thread while the training loader's worker simulates the frames of the first pass (it needs a core of
    its own then), ``threads`` from the iteration after it on, when the worker only replays its cached frames."""

    def __init__(self, first_pass_iters, threads):
        self.first_pass_iters, self.threads = first_pass_iters, threads

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        wanted = 1 if runner.iter < self.first_pass_iters else self.threads
        if torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)
            print(f'iteration {runner.iter}: torch uses {wanted} thread(s)', flush=True)


class CurveRecorder(Hook):
    """Keeps the losses of every logged iteration and the metrics of every validation for the curves PNG."""

    def __init__(self, interval):
        self.interval, self.train, self.val = interval, [], []

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if (runner.iter + 1) % self.interval == 0 and outputs:
            self.train.append(dict(step=runner.iter + 1, **{k: float(v) for k, v in outputs.items()
                                                             if k.startswith('loss')}))

    def after_val_epoch(self, runner, metrics=None):
        self.val.append(dict(step=runner.iter, **{k: float(v) for k, v in (metrics or {}).items()}))

    def last_validation(self):
        """The metrics of the last validation, prefixes (``det/``) removed."""
        return {k.split('/')[-1]: v for k, v in self.val[-1].items() if '/' in k} if self.val else {}


def result_keys(task, classes, results):
    """Columns of the result table: AP per class and threshold (det) or IoU per class (seg)."""
    if task == 'seg':
        return [f'IoU_{c}' for c in classes] + ['IoU_background', 'mIoU', 'fg_IoU', 'acc']
    keys = []
    for res in results:  # KITTI scoring: the moderate difficulty (easy / hard stay in results.json)
        keys += [k for k in res if k not in keys and not k.endswith(('_easy', '_hard', '_num_gt'))]
    return keys


def format_results(rows, keys):
    """A text table: one row per metric key, one column per evaluated data set (``nan``: not measured)."""
    names = [name for name, _ in rows]
    first = max(len(k) for k in keys) + 2
    widths = [max(12, len(n) + 2) for n in names]
    lines = [f'{"metric":<{first}}' + ''.join(f'{n:>{w}}' for n, w in zip(names, widths))]
    for key in keys:
        values = [f'{res.get(key, math.nan):{w}.4f}' for (_, res), w in zip(rows, widths)]
        lines.append(f'{key:<{first}}' + ''.join(values))
    return '\n'.join(lines)


def load_demo_config(args):
    """The config of ``--config`` (relative to the repository) with the demo's overrides and checks."""
    cfg = load_config(osp.join(REPO_ROOT, args.config) if not osp.isabs(args.config) else args.config,
                      args.cfg_options)
    if args.max_iters is not None:
        rescale_schedule(cfg, args.max_iters)  # the one rescaler of every tool
    return check_schedule(cfg)


def main(argv=None):
    """Run the demo; returns the summary written to ``<out-dir>/results.json`` (set-up errors exit with status 2)."""
    parser, args = parse_args(argv)
    try:
        cfg = load_demo_config(args)
    except (ToolError, FileNotFoundError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    threads = torch.get_num_threads()
    try:
        return run_demo(args, cfg)
    finally:
        torch.set_num_threads(threads)  # in-process callers (the tests) keep their thread count


def run_demo(args, cfg):
    """Train, evaluate and draw (see the module docstring); returns the summary written to ``results.json``."""
    torch.set_num_threads(1)  # ThreadsAfterSimulation raises it after the first pass over the training frames
    start = time.perf_counter()
    timer = Timer()
    out_dir = osp.abspath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)

    with timer('set-up'):
        max_iters = cfg.train_cfg.max_iters
        cfg.train_cfg.val_interval = max(1, math.ceil(max_iters / NUM_VALIDATIONS))
        cfg.default_hooks.logger.interval = min(20, max_iters)
        cfg.default_hooks.checkpoint.interval = max_iters
        # One data worker per loader simulates the frames (and keeps them: persistent workers, cached datasets)
        # while this process trains, so simulation costs the second core instead of training time.
        for loader in (cfg.train_dataloader, cfg.val_dataloader):
            loader.update(num_workers=1, persistent_workers=True)
        prepare_runner_cfg(cfg, args.config, osp.join(out_dir, 'work'))
        runner = build_runner(cfg)
        curves = CurveRecorder(cfg.default_hooks.logger.interval)
        runner.register_hook(curves)
        train_set = runner.train_loop.dataloader.dataset
        runner.register_hook(ThreadsAfterSimulation(math.ceil(len(train_set) / cfg.train_dataloader.batch_size),
                                                     args.threads))
        val_set = runner.val_loop.dataloader.dataset
        classes = train_set.classes
        print(f'{len(train_set)} training and {len(val_set)} held-out frames are simulated by data workers as '
              'training reads them', flush=True)

    with timer('simulation and training (validating on held-out simulated frames)'):
        runner.train()
    averaged = use_averaged_weights(runner)  # what the checkpoint holds and validation scored
    if averaged:
        print('the model goes on with the moving average of its weights (EMAHook), as its checkpoint holds them',
              flush=True)
    synthetic = curves.last_validation()
    model = runner.model
    model.eval()
    point_range = cfg.model.point_range
    rows = [(f'simulated held-out ({len(val_set)} frames)', synthetic)]
    pngs = []

    task = 'seg'
    torch.set_num_threads(args.threads)
    with timer('real KITTI frames and pictures'):
        for i in range(min(2, len(val_set))):
            points, sample = predict_item(model, val_set, i)
            task = task_of(sample)
            pngs.append(bev(out_dir, f'bev_synthetic_{i:02d}.png', points, sample, classes, point_range,
                            f'simulated held-out frame {i}', args.min_box_score))
        kitti, reason = kitti_dataset(args, cfg)
        if kitti is None:
            print(f'skipping the real KITTI frames: {reason}', flush=True)
        else:
            samples = []
            bar = ProgressBar(len(kitti))
            for i in range(len(kitti)):
                samples.append(predict_item(model, kitti, i)[1])
                bar.update()
            print(flush=True)
            rows.append((f'real KITTI ({len(kitti)} frames)', score_samples(cfg.test_evaluator, samples, classes)))
            for i in busiest_frames(kitti):
                points, sample = predict_item(model, kitti, i)
                frame_id = kitti.get_data_info(i)['frame_id']
                pngs.append(bev(out_dir, f'bev_kitti_{frame_id}.png', points, sample, classes, point_range,
                                f'real KITTI {frame_id}: {type(model).__name__} trained on the simulated world only',
                                args.min_box_score))
        pngs.append(draw_training_curves(osp.join(out_dir, 'training_curves.png'), curves.train, curves.val,
                                         CURVE_KEYS[task], title=f'{type(model).__name__} on the simulated world'))

    total = time.perf_counter() - start
    key, label, target = HEADLINE[task]
    real = rows[-1][1].get(key, math.nan) if len(rows) > 1 else math.nan
    print('\n=== results ===')
    print(format_results(rows, result_keys(task, classes, [res for _, res in rows])))
    print('\nphase                                                  wall (s)   cpu (s)')
    for name, (wall, cpu) in timer.phases.items():
        print(f'{name:<54}{wall:9.1f}{cpu:10.1f}')
    print(f'{"total":<54}{total:9.1f}')
    print(f'\n{label}: simulated held-out {synthetic.get(key, math.nan):.4f}, real KITTI {real:.4f} '
          f'(target on real frames >= {target}: {"PASS" if real >= target else "FAIL"})')
    print('pictures: ' + ', '.join(osp.relpath(str(p)) for p in pngs))
    summary = dict(task=task, results={name: res for name, res in rows}, phases=timer.phases, total_seconds=total,
                   max_iters=cfg.train_cfg.max_iters, threads=args.threads, averaged_weights=averaged,
                   pictures=[str(p) for p in pngs])
    with open(osp.join(out_dir, 'results.json'), 'w') as f:
        json.dump(summary, f, indent=2, default=float)
    print('RESULT ' + json.dumps({'task': task, f'synthetic_{key}': synthetic.get(key, math.nan),
                                  f'real_{key}': real, 'seconds': round(total, 1)}))
    return summary


if __name__ == '__main__':
    main()
