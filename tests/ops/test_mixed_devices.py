"""Raw ``torch.ops.fsdlite`` calls that mix 'meta' and real (CPU) tensors.

Such a call dispatches to the op's fake kernel; before the device check in ``_checks.register_fake`` it
returned uninitialised CPU tensors (garbage indices) instead of failing. Every op must raise naming the devices.
"""
import importlib

import pytest
import torch

from fsdlite.ops.build import families

for _family in families():  # registers every family's schemas and fake kernels
    importlib.import_module(f'fsdlite.ops.{_family}')
F = torch.ops.fsdlite


def _long(*values):
    return torch.tensor(values, dtype=torch.long)


def _kp_args():
    q, s = torch.rand(2, 3), torch.rand(3, 3)
    return q, s, _long([0, 3], [1, 2]), torch.rand(3, 4), torch.rand(2, 3)


def _cases():
    pts, boxes = torch.rand(4, 3), torch.tensor([[0.5, 0.5, 0.0, 1.0, 1.0, 1.0, 0.0]])
    coors = _long([0, 0, 0, 0], [0, 1, 1, 1])
    q, s, nb, x, kp = _kp_args()
    return {
        'voxelize': (lambda t: F.voxelize(t, [1.0] * 3, [0.0] * 3 + [1.0] * 3, _long(0, 0, 0, 0)), pts),
        'segment_reduce': (lambda t: F.segment_reduce(t, _long(0, 1, 1, 0), 2, 'max'), pts),
        'grid_subsample': (lambda t: F.grid_subsample(pts, [0.5] * 3, t), _long(0, 0, 0, 0)),
        'boxes_iou_bev': (lambda t: F.boxes_iou_bev(boxes, t, False), boxes.clone()),
        'nms_bev_mask': (lambda t: F.nms_bev_mask(boxes, t, 0.5, False), _long(0)),
        'knn': (lambda t: F.knn(pts, t, 2), pts.clone()),
        'radius_neighbors': (lambda t: F.radius_neighbors(pts, t, 0.5, 2), pts.clone()),
        'knn_aggregate': (lambda t: F.knn_aggregate(x, t, torch.rand(2, 2)), nb),
        'kp_aggregate': (lambda t: F.kp_aggregate(q, s, nb, x, t, None, None, 1.0, 'linear', 'sum'), kp),
        'neighbor_aggregate': (lambda t: F.neighbor_aggregate(t, x, torch.rand(2, 2, 1)), nb),
        'kpconv': (lambda t: F.kpconv(q, s, nb, x, kp, t, None, 1.0, 'linear', 'sum'), torch.rand(2, 4, 5)),
        'kpconv_backward': (lambda t: F.kpconv_backward(t, q, s, nb, x, kp, torch.rand(2, 4, 5), None, 1.0, 'linear',
                                                        'sum', [True] * 4), torch.rand(2, 5)),
        'points_in_boxes': (lambda t: F.points_in_boxes(pts, boxes, t, _long(0), 'center'), _long(0, 0, 0, 0)),
        'points_in_boxes_all': (lambda t: F.points_in_boxes_all(t, boxes, None, None, 'center'), pts.clone()),
        'rulebook_subm': (lambda t: F.rulebook_subm(coors, t, [2, 2, 2], [3, 3, 3], [1, 1, 1]), torch.tensor(2)),
        'rulebook_conv': (lambda t: F.rulebook_conv(t, torch.tensor(2), [2, 2, 2], [2, 2, 2], [2, 2, 2], [0, 0, 0],
                                                    [1, 1, 1], 4), coors),
        'connected_components': (lambda t: F.connected_components(pts, t, None, None, 2, False), torch.tensor([0.1])),
        'connected_components(class_ids)': (lambda t: F.connected_components(pts, torch.tensor([0.1]), None, t, 2,
                                                                              False), _long(0, 0, 0, 0)),
    }


CASES = _cases()


@pytest.mark.parametrize('name', sorted(CASES))
def test_raw_op_rejects_a_meta_tensor_among_cpu_tensors(name):
    call, tensor = CASES[name]
    call(tensor)  # the all-CPU call is valid
    with pytest.raises(ValueError, match=r'all tensors must be on one device, got .* on meta'):
        call(tensor.to('meta'))


def test_all_meta_calls_still_give_shapes():
    q, s, nb, x, kp = _kp_args()
    meta = [t.to('meta') for t in (q, s, nb, x, kp)]
    out = F.kpconv(*meta, torch.empty(2, 4, 5, device='meta'), None, 1.0, 'linear', 'sum')
    assert out.is_meta and out.shape == (2, 5)
    index, sqdist = F.knn(torch.rand(4, 3, device='meta'), torch.rand(5, 3, device='meta'), 2)
    assert index.is_meta and index.shape == (4, 2) and sqdist.shape == (4, 2)
