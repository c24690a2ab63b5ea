"""Training curves: losses per logged iteration and metrics per validation (``tools/demo.py`` records them)."""
import math
from pathlib import Path

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402


def draw_training_curves(out_file, train, val, metric_keys, title=None):
    """A PNG with the losses (left) and the validation metrics (right, x100) against the iteration.

    Args:
        out_file (str | Path): the PNG to write.
        train (list[dict]): training log records (``step`` and ``loss*`` keys).
        val (list[dict]): validation records (``step`` and metric keys).
        metric_keys (sequence[str]): validation keys to plot (e.g. ``'det/Car_BEV_AP@0.5'``); missing ones are
            skipped.
        title (str, optional): figure title.
    Returns:
        Path: ``out_file``.
    """
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


__all__ = ['draw_training_curves']
