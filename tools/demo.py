#!/usr/bin/env python
"""``make demo``: train FSD-lite on synthetic lidar scenes, evaluate it on held-out frames (BEV / 3D AP, R40),
run it on the real KITTI frame 000008, write BEV PNGs with ground-truth and predicted boxes and print the AP table.

    python tools/demo.py [--config CONFIG] [--out-dir demo_out] [--max-iters N] [--threads T]

Any synthetic-lidar config works: a detector (``pred_instances_3d``: AP table, boxes in the pictures) or the
SparseSegmentor (``configs/segmentation/sparse_segmentor_synthetic.py``: per-class IoU, point labels).

Everything it writes goes to ``--out-dir`` (checkpoints and logs in ``<out-dir>/work``).
"""
import argparse
import json
import math
import os
import os.path as osp
import sys
import time

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

import torch  # noqa: E402
from mmengine.config import Config  # noqa: E402
from mmengine.dataset import pseudo_collate  # noqa: E402
from mmengine.utils import ProgressBar  # noqa: E402

from fsdlite.engine.errors import ToolError  # noqa: E402
from fsdlite.engine.tool_setup import (CfgOptionsAction, build_runner, check_schedule, load_config,  # noqa: E402
                                       in_dir, number, out_dir, prepare_runner_cfg)
from fsdlite.registry import DATASETS, METRICS  # noqa: E402
from fsdlite.visualization.bev import draw_bev  # noqa: E402

DEFAULT_CONFIG = 'configs/fsd/fsdlite_synthetic.py'
KITTI_CONFIG = 'configs/_base_/datasets/kitti.py'
# The headline number and its target, by the kind of model: detectors report Car BEV AP@0.5, segmentors Car IoU.
HEADLINE = {'det': ('Car_BEV_AP@0.5', 'Car BEV AP@0.5', 0.6), 'seg': ('IoU_Car', 'Car IoU', 0.6)}


def parse_args(argv=None):
    """Command-line options of the demo; returns ``(parser, args)``."""
    parser = argparse.ArgumentParser(description='fsdlite demo: synthetic training, evaluation, KITTI frame, BEV PNGs')
    parser.add_argument('--config', default=DEFAULT_CONFIG,
                        help='synthetic-lidar detector or segmentor config to train')
    parser.add_argument('--out-dir', type=out_dir, default='demo_out',
                        help='folder for PNGs, results.json and the work dir')
    parser.add_argument('--max-iters', type=number(int, 1), default=None,
                        help='training iterations (default: the config)')
    parser.add_argument('--threads', type=number(int, 1), default=1,
                        help='torch intra-op threads (default 1: predictable on a busy 2-core CPU)')
    parser.add_argument('--min-box-score', type=number(float, 0, 1), default=0.3,
                        help='draw predicted boxes at or above this score (the title counts the others)')
    parser.add_argument('--kitti-root', type=in_dir, default=None, help='folder holding 000008.bin/.pkl (default: the '
                        'KITTI base config data_root, ../shared/data/kitti_object_000008)')
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


def set_max_iters(cfg, max_iters):
    """Set ``train_cfg.max_iters`` and rescale the schedule with it (:func:`fsdlite.engine.schedule.rescale_schedule`,
    the one rescaler of every tool)."""
    from fsdlite.engine.schedule import rescale_schedule
    rescale_schedule(cfg, max_iters)


def pregenerate(dataset, what):
    """Render (and cache) every frame of a synthetic dataset up front, with a progress bar."""
    if not hasattr(dataset, 'generate'):
        return
    print(f'generating {len(dataset)} {what} frames', flush=True)
    bar = ProgressBar(len(dataset))
    for i in range(len(dataset)):
        dataset.load_sample(dataset.get_data_info(i))
        bar.update()
    print(flush=True)


def predict(model, dataset, index):
    """(points (N, C), data sample with ground truth and ``pred_instances_3d`` / ``pred_pts_seg``) of item
    ``index``."""
    item = dataset[index]
    with torch.no_grad():
        sample = model.test_step(pseudo_collate([item]))[0]
    return item['inputs']['points'], sample


def task_of(sample):
    """'det' when the model predicts boxes (``pred_instances_3d``), else 'seg' (per-point labels)."""
    return 'det' if 'pred_instances_3d' in sample else 'seg'


def frame_metrics(evaluator_cfg, samples, classes):
    """The config's test metric (DetMetric / SegMetric) computed on ``samples`` (a list of data samples)."""
    metric = METRICS.build(dict(evaluator_cfg))
    metric.dataset_meta = dict(classes=tuple(classes))
    metric.process(None, [s.to_dict() for s in samples])
    return metric.compute_metrics(metric.results)


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


def kitti_dataset(args):
    """The KITTI 000008 dataset (test pipeline of the KITTI base config), or (None, reason)."""
    kcfg = Config.fromfile(osp.join(REPO_ROOT, KITTI_CONFIG))
    dataset_cfg = kcfg.test_dataloader.dataset
    root = args.kitti_root or dataset_cfg.data_root
    root = root if osp.isabs(root) else osp.join(REPO_ROOT, root)
    if not osp.isfile(osp.join(root, dataset_cfg.ann_file)):
        return None, f'{osp.join(root, dataset_cfg.ann_file)} not found'
    dataset_cfg.data_root = root
    return DATASETS.build(dataset_cfg), None


def result_keys(task, classes, results):
    """Columns of the result table: AP per class and threshold (det) or IoU per class (seg)."""
    if task == 'seg':
        return [f'IoU_{c}' for c in classes] + ['IoU_background', 'mIoU', 'fg_IoU', 'acc']
    keys = []
    for res in results:
        keys += [k for k in res if k not in keys]
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
        set_max_iters(cfg, args.max_iters)
    return check_schedule(cfg)


def main(argv=None):
    """Run the demo; returns the summary written to ``<out-dir>/results.json`` (set-up errors exit with status 2)."""
    parser, args = parse_args(argv)
    try:
        cfg = load_demo_config(args)
    except (ToolError, FileNotFoundError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc}\n')
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    timer = Timer()
    out_dir = osp.abspath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)

    with timer('set-up and data generation'):
        cfg.train_cfg.val_interval = cfg.train_cfg.max_iters + 1
        cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None  # evaluation happens once, below
        cfg.default_hooks.logger.interval = 20
        cfg.default_hooks.checkpoint.interval = cfg.train_cfg.max_iters
        prepare_runner_cfg(cfg, args.config, osp.join(out_dir, 'work'))
        runner = build_runner(cfg)
        # The loops own the dataset instances: fill their frame caches up front (with progress).
        train_set = runner.train_loop.dataloader.dataset
        test_set = runner.test_loop.dataloader.dataset
        pregenerate(train_set, 'training')
        pregenerate(test_set, 'held-out')
        classes = train_set.classes

    with timer('training'):
        runner.train()
    with timer('evaluation on held-out synthetic frames'):
        synthetic = runner.test()
    synthetic = {k.split('/')[-1]: v for k, v in synthetic.items()}
    model = runner.model
    model.eval()
    point_range = cfg.model.point_range
    rows = [(f'synthetic held-out ({len(test_set)} frames)', synthetic)]
    pngs = []

    task = 'seg'
    with timer('KITTI 000008 and BEV pictures'):
        for i in range(min(2, len(test_set))):
            points, sample = predict(model, test_set, i)
            task = task_of(sample)
            pngs.append(bev(out_dir, f'bev_synthetic_{i:02d}.png', points, sample, classes, point_range,
                            f'synthetic held-out frame {i}', args.min_box_score))
        kitti, reason = kitti_dataset(args)
        if kitti is None:
            print(f'skipping the KITTI frame: {reason}', flush=True)
        else:
            points, sample = predict(model, kitti, 0)
            rows.append(('KITTI 000008 (real)', frame_metrics(cfg.test_evaluator, [sample], classes)))
            pngs.append(bev(out_dir, 'bev_kitti_000008.png', points, sample, classes, point_range,
                            f'KITTI 000008: {type(model).__name__} trained on synthetic scenes only',
                            args.min_box_score))

    total = time.perf_counter() - start
    key, label, target = HEADLINE[task]
    car = synthetic.get(key, math.nan)
    print('\n=== results ===')
    print(format_results(rows, result_keys(task, classes, [res for _, res in rows])))
    print('\nphase                                        wall (s)   cpu (s)')
    for name, (wall, cpu) in timer.phases.items():
        print(f'{name:<44}{wall:9.1f}{cpu:10.1f}')
    print(f'{"total":<44}{total:9.1f}')
    print(f'\n{label} on held-out synthetic frames: {car:.4f} (target >= {target}: '
          f'{"PASS" if car >= target else "FAIL"})')
    print('pictures: ' + ', '.join(osp.relpath(str(p)) for p in pngs))
    summary = dict(task=task, results={name: res for name, res in rows}, phases=timer.phases, total_seconds=total,
                   max_iters=cfg.train_cfg.max_iters, threads=args.threads, pictures=[str(p) for p in pngs])
    with open(osp.join(out_dir, 'results.json'), 'w') as f:
        json.dump(summary, f, indent=2, default=float)
    print('RESULT ' + json.dumps({'task': task, key: car, 'seconds': round(total, 1)}))
    return summary


if __name__ == '__main__':
    main()
