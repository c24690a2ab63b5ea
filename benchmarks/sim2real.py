#!/usr/bin/env python
"""Simulated world -> real KITTI: FSD-lite and FSDv2-lite trained on the simulator only, then fine-tuned on real frames.

    python benchmarks/sim2real.py [--families fsd fsdv2] [--synthetic-iters N] [--synthetic-frames N]
                                  [--finetune-iters N] [--out DIR]

For each family:

(a) train on the simulated world (``configs/<family>/*_synthetic.py``; the demo's schedule unless
    ``--synthetic-iters`` / ``--synthetic-frames``) and score on all 30 real frames of
    ``../shared/data/kitti_tiny_3d`` (points in the camera's view, KITTI's own scoring: moderate, interpolated R40);
(b) fine-tune (a) on the 25 real training frames with ground-truth sampling from them
    (``configs/<family>/*_kitti_tiny.py``) and score on the 5 val frames.

Prints one table: Car / Pedestrian / Cyclist BEV and 3D AP, false boxes per frame at score >= 0.5 and the CPU minutes
of each training (the training runs in a fresh process, one thread; its CPU time is the child's); then how far the
matched cars' boxes are off (yaw, centre along and across the line of sight, size; (a) also on the simulated
held-out frames, so the two worlds compare), the statistics of simulated against real scans, and a final ``RESULT``
JSON line. Training is deterministic on one machine; across machines float rounding differs, so numbers move a
little.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from fsdlite.apis import init_model, predict_item, score_samples
from fsdlite.datasets.sim.statistics import format_statistics, labelled_frames, scan_statistics
from fsdlite.engine.tool_setup import load_config, number
from fsdlite.evaluation.functional.localisation import concatenate_errors, localisation_errors, summarise_errors
from fsdlite.registry import DATASETS

REPO = Path(__file__).resolve().parents[1]
FAMILIES = {
    'fsd': dict(name='FSD-lite', synthetic='configs/fsd/fsdlite_synthetic.py',
                kitti='configs/fsd/fsdlite_kitti_tiny.py'),
    'fsdv2': dict(name='FSDv2-lite', synthetic='configs/fsdv2/fsdv2lite_synthetic.py',
                  kitti='configs/fsdv2/fsdv2lite_kitti_tiny.py'),
}
CLASSES = ('Car', 'Pedestrian', 'Cyclist')
REAL_ALL, REAL_VAL = 'ImageSets/trainval.txt', 'ImageSets/val.txt'
TARGETS = dict(demo_car_bev05=0.5, car_bev07=0.5, car_bev05=0.7, false_boxes=2.0, finetune_car_bev07=0.7)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--families', nargs='+', choices=sorted(FAMILIES), default=['fsd', 'fsdv2'])
    parser.add_argument('--synthetic-iters', type=number(int, 1), default=None,
                        help="training iterations on the simulated world (default: the config's, the demo schedule)")
    parser.add_argument('--synthetic-frames', type=number(int, 1), default=None,
                        help="simulated training frames (default: the config's)")
    parser.add_argument('--finetune-iters', type=number(int, 1), default=None,
                        help="fine-tuning iterations on the real frames (default: the kitti_tiny config's)")
    parser.add_argument('--synthetic-checkpoint', nargs='+', default=(), metavar='FAMILY=PATH',
                        help='skip (a) training for a family and score this checkpoint instead')
    parser.add_argument('--out', default='work_dirs/sim2real', help='work folder (checkpoints, logs)')
    parser.add_argument('--no-stats', action='store_true', help='skip the simulated-vs-real scan statistics')
    return parser.parse_args(argv)


def schedule_options(iters):
    """``--cfg-options`` that set a config's iterations (the tools rescale its schedule with them), validate and
    save once, at the end."""
    return [f'train_cfg.max_iters={iters}', f'train_cfg.val_interval={iters}',
            f'default_hooks.checkpoint.interval={iters}']


def train(config, work_dir, options):
    """``tools/train.py`` in a fresh process with one thread; returns (CPU minutes of the child, last checkpoint)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [sys.executable, str(REPO / 'tools' / 'train.py'), config, '--work-dir', str(work_dir)]
    if options:
        cmd += ['--cfg-options', *options]
    log = Path(str(work_dir) + '.log')
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f'$ {" ".join(cmd[1:])}  (log: {log})', flush=True)
    with open(log, 'w') as f:
        proc = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS='1'), stdout=f,
                              stderr=subprocess.STDOUT)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f'training failed (exit {proc.returncode}); see {log}')
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / 60
    latest = Path(work_dir, 'last_checkpoint').read_text().strip()
    return cpu, latest


def evaluate(config, checkpoint, ann_file=None):
    """KITTI-scored metrics of ``checkpoint`` on the kitti_tiny frames listed in ``ann_file`` (None: the config's
    own test set, scored by its metric), with the localisation errors of its matched cars."""
    cfg = load_config(str(REPO / config))
    model = init_model(cfg, checkpoint)
    dataset_cfg = cfg.test_dataloader.dataset
    if ann_file is not None:
        dataset_cfg = dict(dataset_cfg, ann_file=ann_file, data_root=str(REPO / dataset_cfg.data_root))
    dataset = DATASETS.build(dataset_cfg)
    samples = [predict_item(model, dataset, i)[1] for i in range(len(dataset))]
    metrics = score_samples(cfg.test_evaluator, samples, dataset.classes)
    metrics['car_localisation'] = car_localisation(samples, list(dataset.classes).index('Car'))
    metrics['num_frames'] = len(dataset)
    return metrics


def car_localisation(samples, car):
    """:func:`summarise_errors` of the cars matched in ``samples`` (score >= 0.3, centre within 2 m)."""
    def array(boxes):
        return (boxes.tensor if hasattr(boxes, 'tensor') else boxes).numpy()

    per_frame = []
    for sample in samples:
        pred, gt = sample.pred_instances_3d, sample.gt_instances_3d
        is_car = (pred.labels_3d == car).numpy()
        per_frame.append(localisation_errors(array(pred.bboxes_3d)[is_car], pred.scores_3d.numpy()[is_car],
                                             array(gt.bboxes_3d)[(gt.labels_3d == car).numpy()]))
    return summarise_errors(concatenate_errors(per_frame))


def gt_database(kitti_config, out):
    """Build the kitti_tiny ground-truth database the fine-tuning config samples from (once)."""
    path = REPO / load_config(str(REPO / kitti_config)).gt_database
    if not path.is_file():
        subprocess.run([sys.executable, str(REPO / 'tools' / 'create_gt_database.py'), kitti_config, '--out',
                        str(path.parent)], cwd=REPO, check=True)
    return path


def row_cells(metrics):
    cells = []
    for name, thr in (('Car', '0.7'), ('Car', '0.5'), ('Pedestrian', '0.5'), ('Cyclist', '0.5')):
        for kind in ('BEV', '3D'):
            cells.append(100 * metrics.get(f'{name}_{kind}_AP@{thr}', float('nan')))
    cells += [metrics.get(f'{c}_false_boxes_per_frame', float('nan')) for c in CLASSES]
    return cells


HEADER = ['model', 'setting', 'frames', 'Car BEV@.7', 'Car 3D@.7', 'Car BEV@.5', 'Car 3D@.5', 'Ped BEV@.5',
          'Ped 3D@.5', 'Cyc BEV@.5', 'Cyc 3D@.5', 'FP/frame Car', 'FP/frame Ped', 'FP/frame Cyc', 'train CPU min']


LOC_HEADER = ['model', 'setting', 'frames', 'matched', '|yaw| deg', 'yaw bias', '|radial| m', 'radial bias',
              '|lateral| m', 'length bias', 'width bias', 'height bias', 'z bias']
LOC_KEYS = ['dyaw_median_abs', 'dyaw_bias', 'radial_median_abs', 'radial_bias', 'lateral_median_abs', 'dl_bias',
            'dw_bias', 'dh_bias', 'dz_bias']


def print_row(cells, widths):
    """One table line: the model and setting left-aligned, the numbers right-aligned."""
    print(''.join(f'{c:>{w}}' if i > 1 else f'{c:<{w}}' for i, (c, w) in enumerate(zip(cells, widths))))


def print_localisation_table(rows):
    """Medians over the matched cars of each row: absolute errors and biases (prediction - truth)."""
    widths = [11, 34] + [max(len(h) + 2, 10) for h in LOC_HEADER[2:]]
    print_row(LOC_HEADER, widths)
    for row in rows:
        loc = row['metrics']['car_localisation']
        cells = [row['model'], row['setting'], str(row['frames']), str(loc['matches'])]
        cells += [f'{loc[k]:.1f}' if k.startswith('dyaw') else f'{loc[k]:+.2f}' if k.endswith('bias')
                  else f'{loc[k]:.2f}' for k in LOC_KEYS]
        print_row(cells, widths)


def print_table(rows):
    widths = [max(len(h) + 2, 12) for h in HEADER]
    widths[0], widths[1] = 11, 34
    print_row(HEADER, widths)
    for row in (r for r in rows if r.get('table', True)):
        cells = [row['model'], row['setting'], str(row['frames'])] + [f'{v:.1f}' if i < 8 else f'{v:.2f}'
                                                                     for i, v in enumerate(row['cells'])]
        cells.append(f"{row['cpu_min']:.1f}")
        print_row(cells, widths)


def scan_statistics_table():
    """Simulated (24 test frames) against real (30 frames) scan statistics."""
    real = DATASETS.build(dict(type='KittiDataset', data_root=str(REPO / '../shared/data/kitti_tiny_3d'),
                               ann_file=REAL_ALL, camera_fov=True, test_mode=True,
                               data_prefix=dict(pts='velodyne', label='label_2', calib='calib'),
                               metainfo=dict(classes=('Car', 'Pedestrian'))))
    sim = DATASETS.build(dict(type='SyntheticLidarDataset', split='test', num_frames=24,
                              metainfo=dict(classes=('Car', 'Pedestrian'))))
    return format_statistics([('real KITTI (30)', scan_statistics(labelled_frames(real))),
                              ('simulated (24)', scan_statistics(labelled_frames(sim)))])


def run_family(key, args, out, given):
    spec = FAMILIES[key]
    synthetic_cfg = load_config(str(REPO / spec['synthetic']))
    iters = args.synthetic_iters or synthetic_cfg.train_cfg.max_iters
    options = schedule_options(iters)
    if args.synthetic_frames:
        options.append(f'train_dataloader.dataset.num_frames={args.synthetic_frames}')
    frames = args.synthetic_frames or synthetic_cfg.train_dataloader.dataset.num_frames
    if key in given:
        cpu_a, ckpt = float('nan'), given[key]
    else:
        cpu_a, ckpt = train(spec['synthetic'], out / f'{key}_synthetic', options)
    simulated = evaluate(spec['synthetic'], ckpt)
    real_all = evaluate(spec['kitti'], ckpt, REAL_ALL)
    gt_database(spec['kitti'], out)
    options = [f'load_from={ckpt}']
    if args.finetune_iters:
        options += schedule_options(args.finetune_iters)
    cpu_b, tuned = train(spec['kitti'], out / f'{key}_kitti_tiny', options)
    real_val = evaluate(spec['kitti'], tuned, REAL_VAL)
    return [dict(model=spec['name'], setting='(a) on simulated held-out frames', frames=simulated['num_frames'],
                 cells=row_cells(simulated), cpu_min=cpu_a, metrics=simulated, table=False,
                 key=f"{spec['name']} (a) simulated held-out"),
            dict(model=spec['name'], setting=f'(a) simulated only, {iters} it x {frames} fr', frames=30,
                 cells=row_cells(real_all),
                 cpu_min=cpu_a, metrics=real_all),
            dict(model=spec['name'], setting='(b) + fine-tune on 25 real', frames=5, cells=row_cells(real_val),
                 cpu_min=cpu_b, metrics=real_val)]


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out) if Path(args.out).is_absolute() else REPO / args.out
    given = dict(item.split('=', 1) for item in args.synthetic_checkpoint)
    start = time.perf_counter()
    rows = []
    for key in args.families:
        rows += run_family(key, args, out, given)
        print_table(rows)
    print('\n=== simulated world -> real KITTI (KITTI scoring, moderate, interpolated R40, x100) ===')
    print_table(rows)
    print('\n=== localisation of matched cars (score >= 0.3, centre within 2 m; medians) ===')
    print_localisation_table(rows)
    if not args.no_stats:
        print('\n=== scan statistics, camera view ===')
        print(scan_statistics_table())
    result = {r.get('key', f"{r['model']} {r['setting'].split(')')[0]})"): dict(
        car_bev07=r['metrics'].get('Car_BEV_AP@0.7'), car_bev05=r['metrics'].get('Car_BEV_AP@0.5'),
        car_3d07=r['metrics'].get('Car_3D_AP@0.7'), car_false_boxes=r['metrics'].get('Car_false_boxes_per_frame'),
        ped_bev05=r['metrics'].get('Pedestrian_BEV_AP@0.5'), cyc_bev05=r['metrics'].get('Cyclist_BEV_AP@0.5'),
        cpu_min=r['cpu_min'], car_matched=r['metrics']['car_localisation']['matches'],
        **{f'car_{k}': r['metrics']['car_localisation'][k] for k in LOC_KEYS}) for r in rows}
    print(f'\ntotal {time.perf_counter() - start:.0f} s')
    print('RESULT ' + json.dumps(dict(benchmark='sim2real', rows=result), default=float))
    return rows


if __name__ == '__main__':
    main()
