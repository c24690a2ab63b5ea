"""Bird's-eye-view PNGs of lidar points with per-point classes / scores and 7-dof boxes (matplotlib Agg)."""
from pathlib import Path

import numpy as np
import torch

from fsdlite.structures.boxes import bev_corners

BACKGROUND_COLOR = (0.6, 0.6, 0.6)
CLASS_COLORS = ((0.90, 0.30, 0.10), (0.15, 0.45, 0.95), (0.70, 0.20, 0.85), (0.95, 0.75, 0.10),
                (0.10, 0.75, 0.60), (0.55, 0.35, 0.20))
GT_BOX_COLOR = (0.0, 0.8, 0.2)
PRED_BOX_COLOR = (1.0, 0.1, 0.1)


def _numpy(x, dtype=None):
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.asarray(x)
    return x.astype(dtype) if dtype is not None else x


def class_colors(labels, num_classes):
    """(N, 3) RGB per label; label ``num_classes`` (or any out-of-range value) is background grey."""
    labels = _numpy(labels, np.int64)
    table = np.array([CLASS_COLORS[i % len(CLASS_COLORS)] for i in range(num_classes)] + [BACKGROUND_COLOR])
    return table[np.where((labels >= 0) & (labels < num_classes), labels, num_classes)]


def _draw_boxes(ax, boxes, color, labels=None, scores=None, class_names=(), dashed=False):
    boxes = _numpy(boxes, np.float64)
    if boxes is None or boxes.size == 0:
        return
    boxes = boxes.reshape(-1, 7)
    scores = _numpy(scores)
    labels = _numpy(labels)
    for i, corners in enumerate(bev_corners(torch.from_numpy(boxes)).numpy()):
        closed = np.vstack([corners, corners[:1]])
        ax.plot(closed[:, 0], closed[:, 1], color=color, lw=1.0, ls='--' if dashed else '-')
        front = corners[[0, 3]].mean(0)  # heading: centre -> middle of the front (+l/2) edge
        ax.plot([boxes[i, 0], front[0]], [boxes[i, 1], front[1]], color=color, lw=1.0)
        text = []
        if labels is not None and 0 <= int(labels[i]) < len(class_names):
            text.append(class_names[int(labels[i])])
        if scores is not None:
            text.append(f'{float(scores[i]):.2f}')
        if text:
            ax.text(corners[:, 0].max(), corners[:, 1].max(), ' '.join(text), color=color, fontsize=5)


def draw_bev(out_file, points, class_names, *, gt_labels=None, pred_labels=None, pred_scores=None,
             gt_boxes=None, gt_box_labels=None, pred_boxes=None, pred_box_labels=None, pred_box_scores=None,
             point_range=None, title=None, point_size=0.3, dpi=150):
    """Write a BEV PNG with one panel per point colouring that is given.

    Panels: ``gt_labels`` (ground-truth classes), ``pred_labels`` (predicted classes) and
    ``pred_scores`` (foreground score, a colour map).  Ground-truth boxes (green) are drawn on every
    panel, predicted boxes (red, dashed, with scores) on the prediction panels.  Without any
    colouring a single panel shows the points by height (with the predicted boxes, if any).

    Args:
        out_file (str | Path): PNG path (parent folders are created).
        points (array | Tensor): (N, >=2) points; x, y are used.
        class_names (Sequence[str]): C names; label C is background.
        gt_labels, pred_labels (array | Tensor | None): (N,) int labels in ``[0, C]``.
        pred_scores (array | Tensor | None): (N,) or (N, C) scores in [0, 1] (max over classes is shown).
        gt_boxes, pred_boxes (array | Tensor | None): (M, 7) boxes; ``*_box_labels`` (M,) and
            ``pred_box_scores`` (M,) annotate them.
        point_range (Sequence[float] | None): ``(x_min, y_min, z_min, x_max, y_max, z_max)`` axis limits.
        title (str | None): figure title.
    Returns:
        Path: the written file.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    pts = _numpy(points, np.float32)
    if pts.ndim != 2 or pts.shape[1] < 2:
        raise ValueError(f'points must have shape (N, >=2), got {pts.shape}')
    n, num_classes = pts.shape[0], len(class_names)
    for name, value in (('gt_labels', gt_labels), ('pred_labels', pred_labels), ('pred_scores', pred_scores)):
        if value is not None and _numpy(value).shape[0] != n:
            raise ValueError(f'{name} has {_numpy(value).shape[0]} rows for {n} points')
    panels = []
    if gt_labels is not None:
        panels.append(('ground truth', class_colors(gt_labels, num_classes), False))
    if pred_labels is not None:
        panels.append(('prediction', class_colors(pred_labels, num_classes), True))
    if pred_scores is not None:
        scores = _numpy(pred_scores, np.float32)
        panels.append(('foreground score', scores.max(1) if scores.ndim == 2 else scores, True))
    if not panels:
        panels.append(('points (height)', pts[:, 2] if pts.shape[1] > 2 else np.zeros(n), pred_boxes is not None))

    fig = Figure(figsize=(6.0 * len(panels), 6.0))
    FigureCanvasAgg(fig)
    for k, (name, colour, is_pred) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        if colour.ndim == 1:
            sc = ax.scatter(pts[:, 0], pts[:, 1], c=colour, s=point_size, cmap='viridis', linewidths=0,
                            vmin=0.0 if name == 'foreground score' else None,
                            vmax=1.0 if name == 'foreground score' else None)
            fig.colorbar(sc, ax=ax, fraction=0.04)
        else:
            ax.scatter(pts[:, 0], pts[:, 1], c=colour, s=point_size, linewidths=0)
        _draw_boxes(ax, gt_boxes, GT_BOX_COLOR, gt_box_labels, None, class_names)
        if is_pred:
            _draw_boxes(ax, pred_boxes, PRED_BOX_COLOR, pred_box_labels, pred_box_scores, class_names, dashed=True)
        if point_range is not None:
            ax.set_xlim(point_range[0], point_range[3])
            ax.set_ylim(point_range[1], point_range[4])
        ax.set_aspect('equal')
        ax.set_title(name, fontsize=9)
        ax.set_xlabel('x (m)', fontsize=8)
        ax.set_ylabel('y (m)', fontsize=8)
        ax.tick_params(labelsize=7)
    handles = [Line2D([], [], marker='o', ls='', color=CLASS_COLORS[i % len(CLASS_COLORS)], label=c)
               for i, c in enumerate(class_names)]
    handles.append(Line2D([], [], marker='o', ls='', color=BACKGROUND_COLOR, label='background'))
    if gt_boxes is not None:
        handles.append(Line2D([], [], color=GT_BOX_COLOR, label='GT box'))
    if pred_boxes is not None:
        handles.append(Line2D([], [], color=PRED_BOX_COLOR, ls='--', label='predicted box'))
    fig.legend(handles=handles, loc='lower center', ncol=len(handles), fontsize=7, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, bbox_inches='tight')
    return out


__all__ = ['class_colors', 'draw_bev']
