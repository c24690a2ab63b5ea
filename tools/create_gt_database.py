"""Build the ground-truth database used by the ObjectSample transform.

    python tools/create_gt_database.py CONFIG --out DIR [--num-frames N] [--cfg-options k=v ...]

Reads the training dataset of CONFIG (``train_dataloader.dataset``, through wrapper datasets), loads
every frame without its pipeline (no augmentation), cuts out the points inside each annotated box
and writes ``DIR/gt_database.npz`` (see :mod:`fsdlite.datasets.gt_database`).  Prints objects and
points per class.
"""
import argparse
import copy
import os.path as osp
import sys

from fsdlite.engine.errors import ToolError
from fsdlite.engine.tool_setup import CfgOptionsAction, load_config, number, out_dir


def training_dataset_cfg(cfg):
    """The innermost dataset config of ``cfg.train_dataloader`` (unwrapping e.g. RepeatDataset)."""
    if 'train_dataloader' not in cfg:
        raise KeyError('the config has no train_dataloader; expected train_dataloader.dataset to read frames from')
    ds = copy.deepcopy(cfg.train_dataloader['dataset'])
    while 'dataset' in ds:
        ds = ds['dataset']
    return ds


def build_database(cfg, num_frames=None, progress=True):
    """Build the :class:`~fsdlite.datasets.gt_database.GTDatabase` of a config's training frames."""
    from fsdlite.datasets.gt_database import GTDatabase
    from fsdlite.registry import DATASETS

    ds_cfg = training_dataset_cfg(cfg)
    ds_cfg['pipeline'] = []
    dataset = DATASETS.build(ds_cfg)
    meta = dict(config=getattr(cfg, 'filename', None), dataset_cfg={k: str(v) for k, v in ds_cfg.items()})
    return GTDatabase.from_dataset(dataset, num_frames=num_frames, meta=meta, progress=progress)


def main(argv=None):
    """Command line (see the module docstring): write ``--out/gt_database.npz`` and print per-class counts; returns 0
    (exits with status 2 on a bad config)."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', help='config whose train_dataloader.dataset provides the frames')
    parser.add_argument('--out', type=out_dir, required=True, help='output folder (gt_database.npz is written there)')
    parser.add_argument('--num-frames', type=number(int, 1), default=None, help='use only the first N frames')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction, metavar='KEY=VALUE',
                        help='override config entries (keys must exist)')
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.cfg_options)
        training_dataset_cfg(cfg)
    except (ToolError, FileNotFoundError, KeyError) as exc:
        parser.exit(2, f'{parser.prog}: error: {exc.args[0] if isinstance(exc, KeyError) else exc}\n')
    db = build_database(cfg, args.num_frames)
    path = osp.join(args.out, 'gt_database.npz')
    db.save(path)
    counts = db.counts()
    num_points = db.num_points
    print(f'\nwrote {path}: {len(db)} objects from {db.meta["num_frames"]} frames')
    for i, name in enumerate(db.classes):
        pts = num_points[db.labels == i]
        mean = float(pts.float().mean()) if len(pts) else 0.0
        print(f'  {name:<12} {counts[name]:>6} objects, {int((pts == 0).sum()):>5} without points, '
              f'{mean:8.1f} points on average')
    return 0


if __name__ == '__main__':
    sys.exit(main())
