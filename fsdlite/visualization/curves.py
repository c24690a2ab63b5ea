"""Training curves from mmengine's ``vis_data/scalars.json``: losses per logged iteration and metrics per validation."""
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402


def read_scalars(path):
    """Records of a ``scalars.json`` (one JSON object per line) split into training logs and validations.

    Returns:
        tuple of lists of dicts: ``(train, val)``; a record with a ``loss`` key is a training log, any other
        record holding a metric (a key with '/') is a validation.
    """
    train, val = [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f'{path}:{number}: not a JSON record ({exc.msg})') from None
            if 'loss' in record:
                train.append(record)
            elif any('/' in key for key in record):
                val.append(record)
    return train, val


def draw_training_curves(out_file, scalars_path, metric_keys, title=None):
    """A PNG with the losses (left) and the validation metrics (right, x100) against the iteration.

    Args:
        out_file (str | Path): the PNG to write.
        scalars_path (str | Path): mmengine's ``<work_dir>/<timestamp>/vis_data/scalars.json``.
        metric_keys (sequence[str]): validation keys to plot (e.g. ``'det/Car_BEV_AP@0.5'``); missing ones are
            skipped.
        title (str, optional): figure title.
    Returns:
        Path: ``out_file``.
    """
    train, val = read_scalars(scalars_path)
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(12, 4.5))
    if train:
        steps = [r['step'] for r in train]
        for key in sorted({k for r in train for k in r if k.startswith('loss')}):
            ax_loss.plot(steps, [r.get(key, math.nan) for r in train], label=key, lw=1.2 if key == 'loss' else 0.8)
        ax_loss.set_yscale('log')
        ax_loss.legend(fontsize=7)
    ax_loss.set_xlabel('iteration')
    ax_loss.set_title('training losses')
    for key in metric_keys:
        points = [(r['step'], 100 * r[key]) for r in val if key in r and not math.isnan(r[key])]
        if points:
            ax_val.plot(*zip(*points), marker='o', label=key.split('/')[-1])
    ax_val.set_xlabel('iteration')
    ax_val.set_title('validation (x100)')
    if ax_val.lines:
        ax_val.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out_file = Path(out_file)
    fig.savefig(out_file, dpi=110)
    plt.close(fig)
    return out_file


__all__ = ['read_scalars', 'draw_training_curves']
