"""The lidar families on a GPU without spconv (FSDLITE_NO_SPCONV=1: fsdlite's own sparse-conv layers and CUDA
kernels): segmentor, FSD-lite and FSDv2-lite train (the loss falls), predict, agree with the CPU (float64, same
weights: outputs, predictions and parameter gradients), and their fixed-shape (static) twins equal the dynamic
models there. ``cuda`` tests: skipped without a GPU unless FSDLITE_TEST_GPU_DEVICE names another device."""
import copy

import pytest
import torch

from fsdlite.deploy.bound_measure import measure_bounds
from fsdlite.deploy.detector import DetectorGraph
from fsdlite.deploy.fixed_shape import FixedShapeDetector, fixed_inputs
from fsdlite.registry import MODELS
from fsdlite.structures.bounds import scale_bounds
from fsdlite.utils import compat

pytestmark = pytest.mark.cuda
FAMILIES = ['segmentor', 'fsd', 'fsdv2']


@pytest.fixture(autouse=True)
def no_spconv(monkeypatch):
    """Every model here is built without spconv, as on a machine that has none."""
    monkeypatch.setenv(compat.NO_SPCONV_ENV, '1')


def config(kit, family):
    if family == 'segmentor':
        parts = kit.segmentor_parts()
        parts.pop('fg_sampler')
        parts['seg_head'] = dict(type='PointSegHead', num_classes=3, hidden_channels=(32,))
        return dict(type='SparseSegmentor', **parts)
    return getattr(kit, f'{family}_config')()


def build(kit, family, seed=0, **overrides):
    torch.manual_seed(seed)
    return kit.randomize_bn(MODELS.build(dict(config(kit, family), **overrides)), seed)


def batch(kit, seeds=(5, 6)):
    return kit.collate([kit.make_scene(s, num_objects=2) for s in seeds])


def preprocess(model, data, training):
    """The preprocessed batch, points in the model's dtype (float64 models)."""
    out = model.data_preprocessor(copy.deepcopy(data), training)
    dtype = next(model.parameters()).dtype
    out['inputs'] = dict(out['inputs'], points=out['inputs']['points'].to(dtype))
    return out


def loss_of(model, data):
    losses = model(**preprocess(model, data, True), mode='loss')
    return sum(v for k, v in losses.items() if 'loss' in k)


@pytest.mark.parametrize('family', FAMILIES)
def test_training_steps_lower_the_loss(kit, gpu, family):
    model = build(kit, family).to(gpu).train()
    assert model.backbone.resolved_conv_backend(torch.zeros(1, device=gpu)) == 'fsdlite'
    data = batch(kit)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        loss = loss_of(model, data)
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses


@pytest.mark.parametrize('family', FAMILIES)
def test_predict_and_the_cpu_agree(kit, gpu, family):
    """Same float64 weights on the CPU and the GPU: the same raw outputs and predictions (eval), the same loss
    and parameter gradients (training mode)."""
    cpu_model = build(kit, family, seed=1).double()
    gpu_model = copy.deepcopy(cpu_model).to(gpu)
    data = batch(kit, seeds=(7, 8))
    results = []
    for model in (cpu_model, gpu_model):
        model.train()
        model.zero_grad()
        loss = loss_of(model, data)
        loss.backward()
        grads = [p.grad.cpu() if p.grad is not None else None for p in model.parameters()]
        model.eval()
        with torch.no_grad():
            samples = model(**preprocess(model, data, False), mode='predict')
        results.append((loss.detach().cpu(), grads, samples))
    (loss_c, grads_c, pred_c), (loss_g, grads_g, pred_g) = results
    torch.testing.assert_close(loss_g, loss_c, rtol=1e-7, atol=1e-9)
    for a, b in zip(grads_c, grads_g):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-8)
    for a, b in zip(pred_c, pred_g):
        if family == 'segmentor':
            torch.testing.assert_close(b.pred_pts_seg.pts_semantic_mask.cpu(), a.pred_pts_seg.pts_semantic_mask)
            continue
        a, b = a.pred_instances_3d, b.pred_instances_3d
        assert b.bboxes_3d.device.type == gpu.type and b.bboxes_3d.shape == a.bboxes_3d.shape
        torch.testing.assert_close(b.bboxes_3d.cpu(), a.bboxes_3d, rtol=1e-7, atol=1e-7)
        torch.testing.assert_close(b.scores_3d.cpu(), a.scores_3d, rtol=1e-7, atol=1e-9)
        assert torch.equal(b.labels_3d.cpu(), a.labels_3d)


@pytest.mark.parametrize('family', ['fsd', 'fsdv2'])
def test_static_equals_dynamic(kit, gpu, family):
    """The fixed-shape run (bounds measured on this device's dynamic path, exactly at the needed sizes) gives the
    dynamic model's boxes and scores on the device."""
    dynamic = build(kit, family, seed=2).double().eval().to(gpu)
    data = batch(kit, seeds=(9, 10))
    inputs = preprocess(dynamic, data, False)['inputs']
    bounds = scale_bounds(measure_bounds(dynamic, inputs), 1.0)
    static = MODELS.build(dict(config(kit, family), bounds=bounds)).double().eval().to(gpu)
    static.load_state_dict(dynamic.state_dict(), strict=True)
    static = FixedShapeDetector(static)
    with torch.no_grad():
        raw_d, raw_s = dynamic(inputs, mode='tensor'), static(inputs, mode='tensor')
        pred_d, pred_s = dynamic(inputs, mode='predict'), static(inputs, mode='predict')
    k = raw_d['cls_logits'].shape[0]
    assert int(raw_s['num_instances']) == k > 0
    torch.testing.assert_close(raw_s['cls_logits'][:k], raw_d['cls_logits'], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(raw_s['box_codes'][:k], raw_d['box_codes'], rtol=1e-9, atol=1e-9)
    total = 0
    for a, b in zip(pred_d, pred_s):
        a, b = a.pred_instances_3d, b.pred_instances_3d
        torch.testing.assert_close(b.bboxes_3d, a.bboxes_3d, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(b.scores_3d, a.scores_3d, rtol=1e-9, atol=1e-12)
        total += a.bboxes_3d.shape[0]
    assert total > 0


@pytest.mark.parametrize('family', ['fsd', 'fsdv2'])
def test_fixed_shape_forward_replays_as_a_cuda_graph(kit, gpu, family):
    """Fixed shapes make the forward capturable: captured once after a warm-up run, a replay on new inputs of the
    same bounds gives the eager fixed-shape outputs."""
    if gpu.type != 'cuda':
        pytest.skip('CUDA graphs need a CUDA device')
    dynamic = build(kit, family, seed=3).eval().to(gpu)
    first, second = (preprocess(dynamic, batch(kit, seeds=s), False)['inputs'] for s in ((11, 12), (13, 14)))
    bounds = {k: [max(a, b) for a, b in zip(v, w)] if isinstance(v, list) else max(v, w) for (k, v), w in
              zip(measure_bounds(dynamic, first).items(), measure_bounds(dynamic, second).values())}
    static = MODELS.build(dict(config(kit, family), bounds=scale_bounds(bounds, 1.2))).eval().to(gpu)
    static.load_state_dict(dynamic.state_dict(), strict=True)
    module = DetectorGraph(static, 2, ('boxes', 'scores', 'labels', 'box_batch', 'num_boxes', 'dropped'))
    with torch.no_grad():
        si = fixed_inputs(static, first)
        buffers = [t.clone() for t in (*si[:6], *si.nbrs)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            module(*buffers)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = module(*buffers)
        si = fixed_inputs(static, second)
        for buffer, value in zip(buffers, (*si[:6], *si.nbrs)):
            buffer.copy_(value)
        graph.replay()
        want = module(*(*si[:6], *si.nbrs))
    for name, got, expected in zip(module.output_names, outputs, want):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=name)
