"""Channel-label rules of fsdlite's custom ops (see :func:`fsdlite.slim.rules.register_op_rule`).

Each rule states which output channels correspond to which input channels; the tracer couples channels
only through these statements (an op without a rule freezes the channels it touches).
"""
import torch

from .rules import _columns, _rows, flat_outputs, is_float, register_op_rule


def _columnwise(arg):
    """Output rows reduce/gather rows of ``arg``: output column c carries the labels of ``arg``'s column c."""

    def rule(tracer, b, out):
        src = b[arg]
        o = flat_outputs(out)[0]
        if is_float(src) and is_float(o) and src.dim() >= 1:
            cols = _columns(tracer, src, 1)
            tracer.set_label(o, torch.broadcast_to(cols, o.shape))
    return rule


def _knn(tracer, b, out):
    """Distances contract the coordinate channels of query and support: couple them; outputs carry none."""
    q, s = b['query'], b['support']
    if is_float(q) and is_float(s) and q.shape[-1] == s.shape[-1]:
        tracer.store.commit_pairs(_columns(tracer, q, 1).tolist(), _columns(tracer, s, 1).tolist())


def _knn_aggregate(tracer, b, out):
    """mean/max over k neighbours of ``features`` rows weighted by ``weights`` (N, k): column-wise."""
    feats, weights = b['features'], b['weights']
    cols = _columns(tracer, feats, 1)
    rows = _rows(tracer, weights, 1) if is_float(weights) else None
    for o in flat_outputs(out)[:2]:
        labels = [torch.broadcast_to(cols, o.shape)]
        if rows is not None:
            labels.append(torch.broadcast_to(rows.unsqueeze(-1), o.shape))
        tracer.set_label(o, tracer.store.combine(labels))


def _grouped_weights(tracer, weights, channels, o_shape):
    """(M, S, W) per-slot weights shared by C / W consecutive channels -> (M, C) labels (union over slots)."""
    lab = tracer.label(weights)
    m, s, w = lab.shape
    per_group = tracer.store.reduce_rows(lab.permute(0, 2, 1).reshape(m * w, s))[0].view(m, w)
    return torch.broadcast_to(per_group.repeat_interleave(channels // w, dim=1), o_shape)


def _kp_aggregate(tracer, b, out):
    """y[q, c] = sum_k D[k, c] A[q, k, c // G] sum_h infl x[nb[q, h], c]: channel c of x, D and its group of A."""
    feats = b['features']
    o = flat_outputs(out)[0]
    c = feats.shape[1]
    labels = [torch.broadcast_to(_columns(tracer, feats, 1), o.shape)]
    if is_float(b.get('depthwise')):
        labels.append(torch.broadcast_to(_columns(tracer, b['depthwise'], 1), o.shape))
    if is_float(b.get('gen_weights')):
        labels.append(_grouped_weights(tracer, b['gen_weights'], c, o.shape))
    tracer.set_label(o, tracer.store.combine(labels))


def _neighbor_aggregate(tracer, b, out):
    """y[q, c] = sum_h A[q, h, c // G] x[nb[q, h], c]."""
    feats = b['features']
    o = flat_outputs(out)[0]
    labels = [torch.broadcast_to(_columns(tracer, feats, 1), o.shape)]
    if is_float(b.get('weights')):
        labels.append(_grouped_weights(tracer, b['weights'], feats.shape[1], o.shape))
    tracer.set_label(o, tracer.store.combine(labels))


def _grid_subsample(tracer, b, out):
    """Cell means of points/features: output features column c = input column c; points carry none."""
    feats = b.get('features')
    outs = flat_outputs(out)
    if is_float(feats) and len(outs) > 2 and is_float(outs[2]):
        tracer.set_label(outs[2], torch.broadcast_to(_columns(tracer, feats, 1), outs[2].shape))


def _no_channels(tracer, b, out):
    """Coordinates / indices in, coordinates / indices out: no channel correspondence."""


register_op_rule('fsdlite::segment_reduce', _columnwise('src'))
register_op_rule('fsdlite::knn', _knn)
register_op_rule('fsdlite::knn_aggregate', _knn_aggregate)
register_op_rule('fsdlite::kp_aggregate', _kp_aggregate)
register_op_rule('fsdlite::neighbor_aggregate', _neighbor_aggregate)
register_op_rule('fsdlite::grid_subsample', _grid_subsample)
for _name in ('voxelize', 'points_in_boxes', 'points_in_boxes_all', 'boxes_iou_bev', 'nms_bev_mask',
              'connected_components', 'radius_neighbors', 'rulebook_subm', 'rulebook_conv', 'rulebook_inverse'):
    register_op_rule(f'fsdlite::{_name}', _no_channels)

__all__ = []
