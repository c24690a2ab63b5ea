"""KPConv / KPConvD / KPConvX / KPInv layers: impl='naive' (einsum reference) and impl='fused' agree
in outputs and in every gradient; the fixed execution mode (the ONNX formulation) gives the reference's outputs; float64
gradcheck; deformable regularisers; bad arguments."""
import pytest
import torch

from fsdlite.models.kpconv import export_forms
from fsdlite.models.kpconv.depthwise_layers import KPConvD, KPConvX, KPInv
from fsdlite.models.kpconv.kpconv_layer import KPConv
from fsdlite.models.layers.execution import fixed_shapes
from fsdlite.registry import MODELS

C = 8
LAYERS = {
    'kpconv_linear_sum': (KPConv, dict(in_channels=C, out_channels=6)),
    'kpconv_gaussian_nearest': (KPConv, dict(in_channels=C, out_channels=6, influence='gaussian',
                                             aggregation='nearest')),
    'kpconv_deformable_modulated': (KPConv, dict(in_channels=C, out_channels=6, deformable=True, modulated=True)),
    'kpconvd': (KPConvD, dict(channels=C)),
    'kpconvx': (KPConvX, dict(channels=C)),
    'kpconvx_groupnorm_sum': (KPConvX, dict(channels=C, weight_norm=True, aggregation='sum')),
    'kpinv_sigmoid': (KPInv, dict(channels=C)),
    'kpinv_softmax_groups': (KPInv, dict(channels=C, groups=2, weight_act='softmax', reduction=2)),
    'kpinv_tanh_constant': (KPInv, dict(channels=C, weight_act='tanh', influence='constant')),
    'kpinv_original_bn_none': (KPInv, dict(channels=C, generator_norm=dict(type='BN1d', momentum=0.98),
                                           weight_norm=False, weight_act='none')),
}


def build(name, impl, seed=0, kernel_size=7, channels=C):
    cls, kwargs = LAYERS[name]
    kwargs = {k: (channels if v == C and k != 'out_channels' else v) for k, v in kwargs.items()}
    torch.manual_seed(seed)
    layer = cls(kernel_size=kernel_size, radius=0.35, impl=impl, **kwargs).double()
    if getattr(layer, 'deformable', False):  # non-trivial offsets (they start at zero)
        torch.nn.init.normal_(layer.offset_conv.weights, std=0.2)
    return layer


def run(layer, q_pts, s_pts, neighbors, x):
    x = x.clone().requires_grad_(True)
    layer.zero_grad()
    y = layer(q_pts, s_pts, neighbors, x)
    loss = (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum()
    if layer.training and getattr(layer, 'regularizers', None):
        loss = loss + layer.regularizers['fitting'] + layer.regularizers['repulsion']
    loss.backward()
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}


@pytest.mark.parametrize('name', sorted(LAYERS))
@pytest.mark.parametrize('strided', [False, True])
def test_naive_and_fused_agree(name, strided, cloud, neighbor_search):
    points, x = cloud['points'], torch.randn(len(cloud['points']), C, dtype=torch.float64)
    if strided:  # queries are a subset of the supports (a pooling layer): centre features are max-pooled
        q_pts = points[::3].clone()
        neighbors = neighbor_search(q_pts, points, cloud['radius'], 12)
    else:
        q_pts, neighbors = points, cloud['neighbors']
    fused, naive = build(name, 'fused'), build(name, 'naive')
    naive.load_state_dict(fused.state_dict())
    y, gx, gp = run(fused, q_pts, points, neighbors, x)
    y_ref, gx_ref, gp_ref = run(naive, q_pts, points, neighbors, x)
    torch.testing.assert_close(y, y_ref, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(gx, gx_ref, atol=1e-10, rtol=1e-8)
    assert gp.keys() == gp_ref.keys() and gp
    for key in gp:
        torch.testing.assert_close(gp[key], gp_ref[key], atol=1e-9, rtol=1e-7, msg=lambda m: f'{key}: {m}')


@pytest.mark.parametrize('name', sorted(LAYERS))
@pytest.mark.parametrize('strided,chunk', [(False, None), (True, None), (False, 700)])
def test_export_form_matches_reference(name, strided, chunk, cloud, neighbor_search, monkeypatch):
    """The export formulation (Gather, GEMM distances, MatMul contractions, query chunks) computes the reference's
    outputs; ``chunk``: a small CHUNK_ELEMENTS, so that the queries run in several uneven chunks."""
    if chunk:
        monkeypatch.setattr(export_forms, 'CHUNK_ELEMENTS', chunk)
    points, x = cloud['points'], torch.randn(len(cloud['points']), C, dtype=torch.float64)
    q_pts = points[::3].clone() if strided else points
    neighbors = neighbor_search(q_pts, points, cloud['radius'], 12) if strided else cloud['neighbors']
    naive = build(name, 'naive').eval()
    with torch.no_grad():
        with fixed_shapes():  # the fixed execution mode runs the export forms, whatever impl says
            assert naive.forms() == 'export'
            export = naive(q_pts, points, neighbors, x)
        assert naive.forms() == 'naive'
        torch.testing.assert_close(export, naive(q_pts, points, neighbors, x), atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize('place,atol', [('random', 1e-5), ('near', 1e-5), ('on', 1e-3)])
def test_export_form_float32_accuracy(place, atol):
    """float32 export form vs the float64 reference, shadow slots included.  The GEMM distance
    ``|d|^2 - 2 d.kp + |kp|^2`` cancels where a support sits on a kernel point: there the linear influence
    1 - sqrt(d^2) / sigma is off by up to ~sqrt(float32 eps) ~ 3e-4 (the documented worst case; 1e-2 sigma away
    from a kernel point it is back at rounding level)."""
    torch.manual_seed(0)
    layer = KPConv(C, 6, kernel_size=7, radius=0.35, impl='naive').double().eval()
    q_pts = torch.rand(20, 3, dtype=torch.float64) * 4
    offsets = (torch.rand(7, 3, dtype=torch.float64) - 0.5) * 0.6 if place == 'random' else layer.kernel_points
    on_kernel = (q_pts[:, None] + offsets[None]).reshape(-1, 3) + (1e-2 * 0.35 if place == 'near' else 0)
    s_pts = torch.cat([q_pts, on_kernel])
    n = s_pts.shape[0]
    neighbors = torch.cdist(q_pts, s_pts).argsort(1)[:, :12]
    neighbors[:, -3:] = n  # shadows
    x = torch.randn(n, C, dtype=torch.float64)
    with torch.no_grad():
        ref = layer(q_pts, s_pts, neighbors, x)
        with fixed_shapes():
            out = layer.float()(q_pts.float(), s_pts.float(), neighbors, x.float())
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=0)


@pytest.mark.parametrize('name', ['kpconv_deformable_modulated', 'kpconvx_groupnorm_sum', 'kpinv_sigmoid'])
def test_gradcheck_float64(name, neighbor_search):
    g = torch.Generator().manual_seed(1)
    points = torch.rand(14, 3, generator=g, dtype=torch.float64)
    neighbors = neighbor_search(points, points, 0.5, 5)
    layer = build(name, 'fused', kernel_size=4, channels=4).eval()  # eval: BN in inference mode
    names = [n for n, _ in layer.named_parameters()]

    def fn(x, *weights):
        return torch.func.functional_call(layer, dict(zip(names, weights)), (points, points, neighbors, x))

    x = torch.randn(14, 4, generator=g, dtype=torch.float64, requires_grad=True)
    weights = [p.detach().clone().requires_grad_(True) for p in layer.parameters()]
    assert torch.autograd.gradcheck(fn, (x, *weights))


def test_deformable_starts_rigid_and_regularisers(cloud):
    layer = KPConv(C, 4, kernel_size=7, radius=0.35, deformable=True).double()
    rigid = KPConv(C, 4, kernel_size=7, radius=0.35).double()
    rigid.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith('offset_conv')})
    x = torch.randn(len(cloud['points']), C, dtype=torch.float64)
    args = (cloud['points'], cloud['points'], cloud['neighbors'], x)
    torch.testing.assert_close(layer(*args), rigid(*args))  # zero-initialised offsets
    regs = layer.regularizers
    assert regs['fitting'] > 0 and regs['repulsion'] >= 0
    # repulsion only acts on kernel points closer than repulse_extent * sigma
    far = layer.deform_regularizers(cloud['points'][:2], cloud['points'], cloud['neighbors'][:2],
                                    torch.eye(3, dtype=torch.float64)[None].repeat(2, 1, 1) * 10)
    assert far['repulsion'] == 0
    near = layer.deform_regularizers(cloud['points'][:2], cloud['points'], cloud['neighbors'][:2],
                                     torch.zeros(2, 3, 3, dtype=torch.float64))
    # K (K - 1) coincident pairs, each min(0 - 1.2, 0)^2, divided by K (the 1e-6 sqrt epsilon aside)
    assert near['repulsion'] == pytest.approx(2 * 1.2 ** 2, rel=1e-4)
    (regs['fitting'] + regs['repulsion']).backward()
    assert layer.offset_conv.weights.grad.abs().sum() > 0
    layer.eval()
    layer(*args)
    assert layer.regularizers is None


def test_registered_and_kernel_points_in_state_dict():
    layer = MODELS.build(dict(type='KPInv', channels=16, kernel_size=5, radius=1.0))
    assert isinstance(layer, KPInv) and layer.groups == 2  # default: 8 channels per generated weight
    assert 'kernel_points' in layer.state_dict() and not layer.kernel_points.requires_grad
    assert isinstance(MODELS.build(dict(type='KPConvX', in_channels=4, out_channels=4, kernel_size=5)), KPConvX)


@pytest.mark.parametrize('cls,kwargs,match', [
    (KPConv, dict(in_channels=4, out_channels=4, modulated=True), 'modulated'),
    (KPConv, dict(in_channels=4, out_channels=4, impl='cuda'), 'impl'),
    (KPConv, dict(in_channels=4, out_channels=4, influence='box'), 'influence'),
    (KPConv, dict(in_channels=4, out_channels=4, aggregation='max'), 'aggregation'),
    (KPConvD, dict(in_channels=4, out_channels=8), 'channels'),
    (KPConvX, dict(channels=8, groups=3), 'groups'),
    (KPConvX, dict(channels=8, groups=2, channels_per_group=4), 'exactly one'),
    (KPInv, dict(channels=8, weight_act='relu'), 'weight_act'),
    (KPInv, dict(channels=8, channels_per_group=8), 'weight_norm'),
    (KPInv, dict(channels=8, reduction=0), 'reduction'),
])
def test_invalid_arguments(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(kernel_size=5, radius=1.0, **kwargs)


@pytest.mark.cuda
@pytest.mark.parametrize('name', ['kpconv_linear_sum', 'kpconv_deformable_modulated', 'kpconvx', 'kpinv_sigmoid'])
def test_fused_cuda_matches_cpu(name, cloud):
    layer = build(name, 'fused').float()
    x = torch.randn(len(cloud['points']), C)
    args = (cloud['points'].float(), cloud['points'].float(), cloud['neighbors'], x)
    y, gx, gp = run(layer, *args)
    y_cuda, gx_cuda, gp_cuda = run(layer.cuda(), *(a.cuda() for a in args))
    torch.testing.assert_close(y_cuda.cpu(), y, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(gx_cuda.cpu(), gx, atol=1e-4, rtol=1e-4)
    for key in gp:
        torch.testing.assert_close(gp_cuda[key].cpu(), gp[key], atol=1e-4, rtol=1e-4)


def test_neighbor_max_pool_steps_and_shadows(cloud):
    """Query steps (as used while exporting) give the one-step result; all-shadow neighbourhoods pool to 0."""
    from fsdlite.models.kpconv.kp_base import neighbor_max_pool
    x = torch.randn(len(cloud['points']), 5, dtype=torch.float64)
    neighbors = cloud['neighbors'].clone()
    neighbors[:4] = len(x)  # no neighbours at all
    whole = neighbor_max_pool(x, neighbors)
    torch.testing.assert_close(neighbor_max_pool(x, neighbors, chunk=7), whole)
    assert whole[:4].abs().sum() == 0
    expected = torch.cat([x, x.new_zeros((1, 5))])[neighbors[4:]].amax(1)
    torch.testing.assert_close(whole[4:], expected)
