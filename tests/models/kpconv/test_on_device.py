"""KPCNN and KPFCNN on a GPU: training steps lower the loss, predictions and the CPU agree (float64, same weights),
and the fixed-shape export formulation of every kernel-point layer (the fixed execution mode) equals the fused dynamic
kernels there. ``cuda`` tests: skipped without a GPU unless FSDLITE_TEST_GPU_DEVICE names another device."""
import copy

import pytest
import torch
from mmengine.dataset import pseudo_collate

from fsdlite.datasets.point_shapes import PointShapesDataset, PrimitiveScenesDataset
from fsdlite.models.kpconv.kp_base import IMPLS
from fsdlite.models.kpconv.kp_models import KPCNN, KPFCNN
from fsdlite.models.layers.execution import fixed_shapes

pytestmark = pytest.mark.cuda
FAMILIES = ['kpcnn', 'kpfcnn']


def encoder():
    return dict(type='KPEncoder', in_channels=1, channels=(16, 32), blocks=(1, 1), conv_types=('KPConv', 'KPInv'),
                first_subsampling_dl=0.1, conv_radius=2.5, conv_defaults=dict(kernel_size=7))


def build(family, seed=0):
    torch.manual_seed(seed)
    if family == 'kpcnn':
        return KPCNN(num_classes=6, backbone=encoder(), head_channels=(16,),
                     data_preprocessor=dict(type='KPDataPreprocessor', neighbor_limits=[24, 24], max_neighbors=24))
    return KPFCNN(num_classes=6, backbone=encoder(),
                  data_preprocessor=dict(type='KPDataPreprocessor', neighbor_limits=[24, 24], max_neighbors=24))


def data_of(family):
    if family == 'kpcnn':
        ds = PointShapesDataset(num_samples=4, num_points=(200, 300), seed=3)
        return pseudo_collate([ds[i] for i in range(4)])
    ds = PrimitiveScenesDataset(num_samples=2, extent=1.0, point_density=120.0)
    return pseudo_collate([ds[0], ds[1]])


def preprocess(model, data, training):
    out = model.data_preprocessor(copy.deepcopy(data), training)
    dtype = next(model.parameters()).dtype
    pyr = out['inputs']
    pyr.points = [p.to(dtype) for p in pyr.points]
    pyr.features = pyr.features.to(dtype)
    return out


def loss_of(model, data):
    return sum(v for k, v in model(**preprocess(model, data, True), mode='loss').items() if k.startswith('loss'))


@pytest.mark.parametrize('family', FAMILIES)
def test_training_steps_lower_the_loss(gpu, family):
    model = build(family).to(gpu).train()
    data = data_of(family)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        loss = loss_of(model, data)
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses


@pytest.mark.parametrize('family', FAMILIES)
def test_predict_and_the_cpu_agree(gpu, family):
    cpu_model = build(family, seed=1).double()
    gpu_model = copy.deepcopy(cpu_model).to(gpu)
    data = data_of(family)
    results = []
    for model in (cpu_model, gpu_model):
        model.train()
        model.zero_grad()
        loss = loss_of(model, data)
        loss.backward()
        model.eval()
        with torch.no_grad():
            raw = model(**preprocess(model, data, False), mode='tensor')
        results.append((loss.item(), [p.grad.cpu() for p in model.parameters() if p.grad is not None], raw.cpu()))
    (loss_c, grads_c, raw_c), (loss_g, grads_g, raw_g) = results
    assert loss_g == pytest.approx(loss_c, rel=1e-9)
    assert len(grads_g) == len(grads_c)
    for a, b in zip(grads_c, grads_g):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(raw_g, raw_c, rtol=1e-9, atol=1e-9)
    with torch.no_grad():
        samples = gpu_model(**preprocess(gpu_model, data, False), mode='predict')
    assert len(samples) == len(data['data_samples'])


@pytest.mark.parametrize('family', FAMILIES)
def test_fixed_shape_form_equals_dynamic(gpu, family):
    model = build(family, seed=2).double().to(gpu).eval()
    batch = preprocess(model, data_of(family), False)
    layers = [m for m in model.modules() if getattr(m, 'impl', None) in IMPLS]
    assert layers
    for layer in layers:
        layer.impl = 'fused'
    outs = {}
    with torch.no_grad():
        outs['fused'] = model(**batch, mode='tensor')
        with fixed_shapes():
            outs['export'] = model(**batch, mode='tensor')
    torch.testing.assert_close(outs['export'], outs['fused'], rtol=1e-9, atol=1e-9)
