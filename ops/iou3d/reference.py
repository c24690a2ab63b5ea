"""Shapely-free numpy references of BEV IoU and greedy NMS, for tests and benchmarks.

Rotated overlap: box A's corner polygon is clipped by box B's four half-planes
(Sutherland-Hodgman), vectorised over box pairs with fixed-size vertex arrays and a stable
compaction after every clip; the area is the shoelace sum.  Geometry runs in float64 relative
to A's centre.  Only pairs whose circumcircles meet are clipped (the others are 0).
"""
import numpy as np
import torch

_CAPACITY = 16  # vertex slots per polygon (a clipped rectangle has <= 8)
_CHUNK = 1 << 18  # box pairs clipped at once


def bev_params(boxes, axis_aligned=False):
    """(N, >=7) lidar boxes -> dict of float64 arrays x, y, hl, hw, c, s (heading cos/sin)."""
    b = np.asarray(boxes, dtype=np.float64)
    yaw = np.zeros(len(b)) if axis_aligned else b[:, 6]
    return dict(x=b[:, 0], y=b[:, 1], hl=0.5 * b[:, 3], hw=0.5 * b[:, 4], c=np.cos(yaw), s=np.sin(yaw))


def corners_bev(p):
    """(N, 4, 2) counter-clockwise corners relative to each box centre, from :func:`bev_params`."""
    sx = np.array([1.0, -1.0, -1.0, 1.0])
    sy = np.array([1.0, 1.0, -1.0, -1.0])
    lx = sx[None] * p['hl'][:, None]
    ly = sy[None] * p['hw'][:, None]
    return np.stack([p['c'][:, None] * lx - p['s'][:, None] * ly, p['s'][:, None] * lx + p['c'][:, None] * ly], -1)


def _clip(poly, count, ox, oy, ax, ay, half):
    """Clip polygons (P, K, 2) with ``count`` vertices by {p: half - <p - o, a> >= 0}."""
    k = poly.shape[1]
    idx = np.arange(k)[None]
    valid = idx < count[:, None]
    nxt = np.where(idx + 1 < count[:, None], idx + 1, 0)
    d = half[:, None] - ((poly[..., 0] - ox[:, None]) * ax[:, None] + (poly[..., 1] - oy[:, None]) * ay[:, None])
    d_next = np.take_along_axis(d, nxt, 1)
    nxt_pt = np.take_along_axis(poly, nxt[..., None], 1)
    keep = valid & (d >= 0)
    cross = valid & (((d > 0) & (d_next < 0)) | ((d < 0) & (d_next > 0)))
    t = d / np.where(cross, d - d_next, 1.0)
    inter = poly + t[..., None] * (nxt_pt - poly)
    cand = np.stack([poly, inter], 2).reshape(len(poly), 2 * k, 2)
    mask = np.stack([keep, cross], 2).reshape(len(poly), 2 * k)
    order = np.argsort(~mask, axis=1, kind='stable')[:, :_CAPACITY]
    out = np.take_along_axis(cand, order[..., None], 1)
    return out, np.minimum(mask.sum(1), _CAPACITY)


def _rotated_intersection(pa, pb, ia, ib):
    """Intersection areas of pairs (pa[ia], pb[ib]), arrays of pair indices."""
    poly = np.zeros((len(ia), _CAPACITY, 2))
    poly[:, :4] = corners_bev({k: v[ia] for k, v in pa.items()})
    count = np.full(len(ia), 4)
    ox, oy = pb['x'][ib] - pa['x'][ia], pb['y'][ib] - pa['y'][ia]
    c, s, hl, hw = pb['c'][ib], pb['s'][ib], pb['hl'][ib], pb['hw'][ib]
    for ax, ay, half in ((c, s, hl), (-c, -s, hl), (-s, c, hw), (s, -c, hw)):
        poly, count = _clip(poly, count, ox, oy, ax, ay, half)
    nxt = np.where(np.arange(_CAPACITY)[None] + 1 < count[:, None], np.arange(_CAPACITY)[None] + 1, 0)
    q = np.take_along_axis(poly, nxt[..., None], 1)
    valid = np.arange(_CAPACITY)[None] < count[:, None]
    cross = np.where(valid, poly[..., 0] * q[..., 1] - q[..., 0] * poly[..., 1], 0.0)
    area = 0.5 * cross.sum(1)
    area = np.where(count >= 3, area, 0.0)
    cap = np.minimum(4 * pa['hl'][ia] * pa['hw'][ia], 4 * pb['hl'][ib] * pb['hw'][ib])
    return np.clip(area, 0.0, cap)


def iou_matrix_numpy(boxes_a, boxes_b, axis_aligned=False):
    """(N, >=7), (M, >=7) numpy boxes -> (N, M) float64 BEV IoU (0 where the union is empty)."""
    pa, pb = bev_params(boxes_a, axis_aligned), bev_params(boxes_b, axis_aligned)
    n, m = len(pa['x']), len(pb['x'])
    inter = np.zeros((n, m))
    if n and m:
        if axis_aligned:
            dx = np.minimum(pa['x'][:, None] + pa['hl'][:, None], pb['x'][None] + pb['hl'][None]) - \
                np.maximum(pa['x'][:, None] - pa['hl'][:, None], pb['x'][None] - pb['hl'][None])
            dy = np.minimum(pa['y'][:, None] + pa['hw'][:, None], pb['y'][None] + pb['hw'][None]) - \
                np.maximum(pa['y'][:, None] - pa['hw'][:, None], pb['y'][None] - pb['hw'][None])
            inter = np.where((dx > 0) & (dy > 0), dx * dy, 0.0)
        else:
            ra, rb = np.hypot(pa['hl'], pa['hw']), np.hypot(pb['hl'], pb['hw'])
            dist = np.hypot(pa['x'][:, None] - pb['x'][None], pa['y'][:, None] - pb['y'][None])
            ia, ib = np.nonzero(dist < (ra[:, None] + rb[None]) * 1.01 + 1e-9)
            for start in range(0, len(ia), _CHUNK):
                sl = slice(start, start + _CHUNK)
                inter[ia[sl], ib[sl]] = _rotated_intersection(pa, pb, ia[sl], ib[sl])
    area_a = 4 * pa['hl'] * pa['hw']
    area_b = 4 * pb['hl'] * pb['hw']
    union = area_a[:, None] + area_b[None] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def boxes_iou_bev_reference(boxes_a, boxes_b, axis_aligned=False):
    """Torch front end of :func:`iou_matrix_numpy`: (N, M) IoU with the dtype and device of ``boxes_a``."""
    iou = iou_matrix_numpy(boxes_a.detach().cpu().double().numpy(), boxes_b.detach().cpu().double().numpy(),
                           axis_aligned)
    return torch.from_numpy(iou).to(device=boxes_a.device, dtype=boxes_a.dtype)


def _cap_per_sample(indices, batch, cap):
    """Keep the first ``cap`` of ``indices`` (already in priority order) within each sample."""
    seen, out = {}, []
    for i in indices.tolist():
        b = int(batch[i])
        seen[b] = seen.get(b, 0) + 1
        if seen[b] <= cap:
            out.append(i)
    return torch.tensor(out, dtype=torch.long)


def nms_bev_reference(boxes, scores, iou_threshold, labels=None, batch=None, pre_max=None, post_max=None,
                      axis_aligned=False):
    """Greedy BEV NMS, one box at a time.

    Priority: sample ascending, then score descending, then index ascending.  ``pre_max`` /
    ``post_max`` cap the candidates / kept boxes per sample.  A candidate is dropped when a kept
    box of the same sample and label has IoU > ``iou_threshold`` with it.

    Returns:
        Tensor: (K,) int64 kept indices in priority order.
    """
    n = boxes.shape[0]
    labels = torch.zeros(n, dtype=torch.long) if labels is None else labels.cpu().long()
    batch = torch.zeros(n, dtype=torch.long) if batch is None else batch.cpu().long()
    keys = sorted(range(n), key=lambda i: (int(batch[i]), -float(scores[i]), i))
    order = torch.tensor(keys, dtype=torch.long)
    if pre_max is not None:
        order = _cap_per_sample(order, batch, pre_max)
    iou = torch.from_numpy(iou_matrix_numpy(boxes[order].detach().cpu().double().numpy(),
                                            boxes[order].detach().cpu().double().numpy(), axis_aligned))
    same = (labels[order][:, None] == labels[order][None]) & (batch[order][:, None] == batch[order][None])
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    kept = []
    for p in range(len(order)):
        if suppressed[p]:
            continue
        kept.append(p)
        suppressed |= same[p] & (iou[p] > iou_threshold)
    kept = order[torch.tensor(kept, dtype=torch.long)]
    if post_max is not None:
        kept = _cap_per_sample(kept, batch, post_max)
    return kept.to(boxes.device)
