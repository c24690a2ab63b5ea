"""SparseUNet: output voxel layout equals the input layout, configurable stages, gradients, bad configs."""
import pytest
import torch

from fsdlite.models.lidar import SparseUNet
from fsdlite.models.lidar.sparse_unet import using_conv_backend
from fsdlite.models.layers.sparse_conv import RulebookSparseConv3d
from fsdlite.models.layers.sparse_tensor import voxel_order
from fsdlite.ops import voxel_keys
from fsdlite.utils import compat

GRID = dict(voxel_size=(1.0, 1.0, 1.0), point_range=(0.0, 0.0, 0.0, 12.0, 12.0, 8.0))
SMALL = dict(base_channels=4, encoder_channels=((4,), (8, 8), (8,)),
             decoder_channels=((8, 8, 8), (8, 8, 4), (4, 4, 6)))


def _voxels(n, seed, batch_size=2):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randperm(batch_size * 8 * 12 * 12, generator=g)[:n]
    b, rest = keys // (8 * 12 * 12), keys % (8 * 12 * 12)
    coors = torch.stack([b, rest // 144, (rest // 12) % 12, rest % 12], 1)
    return torch.randn(n, 5, generator=g), coors


def test_output_rows_follow_input_rows():
    torch.manual_seed(0)
    net = SparseUNet(5, **GRID, **SMALL).eval()
    feats, coors = _voxels(60, 0)
    out = net(feats, coors, 2)
    assert out.shape == (60, 6) and net.out_channels == 6
    # Permuting the input voxels permutes the output rows identically: row i belongs to voxel i.
    perm = torch.randperm(60, generator=torch.Generator().manual_seed(1))
    out_perm = net(feats[perm], coors[perm], 2)
    assert torch.allclose(out_perm, out[perm], atol=1e-5)


def test_output_layout_is_the_input_index_set():
    net = SparseUNet(5, **GRID, **SMALL).eval()
    feats, coors = _voxels(40, 2)
    seen = {}

    def record(module, args, output):
        seen['coords'] = output.coords

    net.upsample[-1].register_forward_hook(record)
    net(feats, coors, 2)  # run on the voxels sorted by (b, z, y, x), rows put back in the caller's order
    assert torch.equal(seen['coords'], coors[torch.argsort(voxel_keys(coors, net.sparse_shape))])


def test_samples_are_independent():
    net = SparseUNet(5, **GRID, **SMALL).eval()
    feats, coors = _voxels(50, 3)
    out = net(feats, coors, 2)
    first = coors[:, 0] == 0
    alone = net(feats[first], coors[first], 1)
    assert torch.allclose(alone, out[first], atol=1e-5)


def test_backward_reaches_every_parameter():
    net = SparseUNet(5, **GRID, **SMALL)
    feats, coors = _voxels(60, 4)
    feats.requires_grad_()
    net(feats, coors, 2).square().sum().backward()
    assert feats.grad is not None and torch.isfinite(feats.grad).all()
    assert all(p.grad is not None for p in net.parameters())


def test_stage_layout_from_config():
    net = SparseUNet(5, **GRID, base_channels=4, encoder_channels=((4,), (8, 8, 8)),
                     decoder_channels=((8, 8, 4), (4, 4, 4)))
    assert len(net.encoder) == 2 and len(net.encoder[1]) == 3
    assert net.encoder[1][0][0].geometry.kind == 'conv' and net.encoder[1][0][0].stride == [2, 2, 2]
    assert net.upsample[0][0].geometry.kind == 'inverse'
    assert net.upsample[1][0].geometry.kind == 'subm'
    assert net.sparse_shape == (8, 12, 12)


def test_conv_plan_is_kept_until_a_conv_is_replaced():
    net = SparseUNet(5, **GRID, **SMALL)
    plan = net.conv_plan()
    assert net.conv_plan() is plan and plan.modules[0] is net.conv_input[0]
    replacement = RulebookSparseConv3d(5, 4, 3, subm=True, indice_key='subm1')
    net.conv_input._modules['0'] = replacement  # e.g. a slimmed or converted layer: a new plan reads its geometry
    assert net.conv_plan() is not plan and net.conv_plan().modules[0] is replacement


@pytest.mark.parametrize('kwargs, match', [
    (dict(decoder_channels=((8, 8, 8),)), 'one \\(lateral, merge, up\\) entry per encoder stage'),
    (dict(decoder_channels=((8, 8), (8, 8), (4, 4))), r'decoder_channels\[0\] must have 3 entries'),
    (dict(decoder_channels=((8, 5, 8), (8, 8, 4), (4, 4, 6))), 'multiple of merge'),
    (dict(encoder_channels=((4,), (), (8,))), r'encoder_channels\[1\] must not be empty'),
])
def test_bad_configs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SparseUNet(5, **GRID, **{**SMALL, **kwargs})


def test_bad_inputs():
    net = SparseUNet(5, **GRID, **SMALL)
    feats, coors = _voxels(10, 5)
    with pytest.raises(ValueError, match=r'voxel_feats must have shape \(V, 5\)'):
        net(feats[:, :4], coors, 2)
    with pytest.raises(ValueError, match='at least one voxel'):
        net(feats[:0], coors[:0], 2)


# ------------------------------------------------------------------- backends against spconv itself
def _spconv_conv(spconv, conv):
    """spconv's own layer of ``conv``'s kind and geometry, sharing its parameters (gradients reach ``conv``)."""
    g = conv.geometry
    common = dict(indice_key=g.indice_key, bias=conv.bias is not None)
    if g.kind == 'inverse':
        layer = spconv.SparseInverseConv3d(conv.in_channels, conv.out_channels, g.kernel_size, **common)
    else:
        cls = spconv.SubMConv3d if g.kind == 'subm' else spconv.SparseConv3d
        layer = cls(conv.in_channels, conv.out_channels, g.kernel_size, stride=g.stride, padding=g.padding,
                    dilation=g.dilation, **common)
    layer.weight = conv.weight
    layer.bias = conv.bias
    return layer


def spconv_unet_forward(net, feats, coors, batch_size):
    """The reference: ``net``'s conv blocks run by spconv (its layers sharing ``net``'s parameters, its rulebooks and
    kernels, spconv's ``SparseConvTensor``), rows in the caller's order."""
    spconv = compat.import_spconv()

    def run(block, x):
        return spconv.SparseSequential(_spconv_conv(spconv, block[0]), *list(block)[1:])(x)

    x = spconv.SparseConvTensor(feats, coors.int().contiguous(), list(net.sparse_shape), batch_size)
    return net.forward_sparse(x, run).features  # the UNet's wiring on spconv's tensor (it has replace_feature too)


def _twin_nets(seed=0):
    """The network twice with the same weights and non-trivial norms: ``conv_backend`` 'fsdlite' and 'spconv'."""
    torch.manual_seed(seed)
    ours = SparseUNet(5, **GRID, **SMALL, conv_backend='fsdlite')
    theirs = SparseUNet(5, **GRID, **SMALL, conv_backend='spconv')
    with torch.no_grad():  # non-trivial norm statistics and biases, so eval mode tests them too
        for m in ours.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                for t in (m.running_mean, m.running_var, m.weight, m.bias):
                    t.uniform_(0.5, 1.5)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


@pytest.mark.parametrize('backend', ['fsdlite', 'spconv'])
def test_backends_match_spconv_itself(backend):
    """Both backends (fsdlite's kernels, spconv's kernels on fsdlite's kernel maps) give what spconv's own layers,
    rulebooks and kernels give for the same weights, in inference (norms folded) and training."""
    net = _twin_nets(5)[0]
    net.conv_backend = backend
    feats, coors = _voxels(70, 12)
    net.eval()
    with torch.no_grad():
        torch.testing.assert_close(net(feats, coors, 2), spconv_unet_forward(net, feats, coors, 2),
                                   atol=1e-5, rtol=1e-5)
    net.train()
    grads = []
    for forward in (net, lambda *a: spconv_unet_forward(net, *a)):
        x = feats.clone().requires_grad_()
        net.zero_grad()
        forward(x, coors, 2).square().sum().backward()
        grads.append([x.grad] + [p.grad.clone() for p in net.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-4 + 1e-5 * float(b.abs().max()), rtol=1e-4), (a - b).abs().max()


def test_fsdlite_backend_matches_spconv_on_scattered_voxels():
    """Scattered voxels: a strided conv has more than twice its input voxels (every output is kept, the pairs of
    every conv equal spconv's rulebooks, so the result equals spconv's)."""
    ours, theirs = (net.eval() for net in _twin_nets())
    feats, coors = _voxels(40, 6)
    got = ours(feats, coors, 2)
    assert torch.allclose(got, theirs(feats, coors, 2), atol=1e-5)
    assert torch.allclose(got, spconv_unet_forward(ours, feats, coors, 2), atol=1e-5)
    plan = ours.conv_plan()
    order = voxel_order(coors, plan.sparse_shape)
    assert order is not None  # random row order: sorted first
    maps, _ = plan.exact_kernel_maps(coors.index_select(0, order))
    strided_outputs = [kmap.num_out for kmap, g in zip(maps, plan.geometries) if g.kind == 'conv']
    assert strided_outputs[0] > 2 * 40


def test_offset_pairs_of_sorted_and_unsorted_voxels_agree():
    """Voxels sorted by (b, z, y, x) take the fast paths (symmetric submanifold lookups, inverse pairs by a swap);
    the same voxels unsorted are looked up in full and re-sorted. Both give spconv's result."""
    ours, theirs = (net.eval() for net in _twin_nets())
    feats, coors = _voxels(60, 8)
    order = torch.argsort(voxel_keys(coors, (8, 12, 12)))
    with torch.no_grad():
        unsorted = ours(feats, coors, 2)
        in_order = ours(feats[order], coors[order], 2)
        reference = spconv_unet_forward(theirs, feats, coors, 2)
    assert torch.allclose(unsorted, reference, atol=1e-5)
    assert torch.allclose(in_order, reference[order], atol=1e-5)


def test_fsdlite_backend_trains_like_spconv():
    ours, theirs = _twin_nets(1)
    feats, coors = _voxels(80, 7)
    grads = []
    for net in (ours, theirs):
        x = feats.clone().requires_grad_()
        net(x, coors, 2).square().sum().backward()
        grads.append([x.grad] + [p.grad for p in net.parameters()])
    for a, b in zip(*grads):  # float32 sums in another order: tolerance relative to each gradient's scale
        assert torch.allclose(a, b, atol=1e-4 + 1e-5 * float(b.abs().max()), rtol=1e-4), (a - b).abs().max()


def test_auto_backend_follows_the_device():
    net = SparseUNet(5, **GRID, **SMALL)
    assert net.conv_backend == 'auto' and net.resolved_conv_backend(torch.zeros(1, 5)) == 'fsdlite'  # training
    with torch.no_grad():
        assert net.resolved_conv_backend(torch.zeros(1, 5)) == 'fsdlite'  # CPU inference
    assert SparseUNet(5, **GRID, **SMALL, conv_backend='spconv').resolved_conv_backend(torch.zeros(1, 5)) == 'spconv'


def test_spconv_checkpoints_load_unchanged_and_run_without_spconv(monkeypatch):
    """A state_dict of spconv's own layers (its keys and weight layout) loads with strict=True; with
    FSDLITE_NO_SPCONV=1 (what a machine without spconv does) 'auto' runs fsdlite's kernels and gives what spconv's
    layers give, and 'spconv' says why it cannot run."""
    spconv = compat.import_spconv()
    net = _twin_nets(3)[0].eval()
    state = net.state_dict()
    for name, module in net.named_modules():
        if isinstance(module, RulebookSparseConv3d):
            layer = _spconv_conv(spconv, module)
            layer.weight = torch.nn.Parameter(0.2 * torch.randn_like(module.weight))  # spconv's own, new values
            assert type(layer).__module__.startswith('spconv.')
            state.update({f'{name}.{key}': value for key, value in layer.state_dict().items()})
    monkeypatch.setenv(compat.NO_SPCONV_ENV, '1')
    assert not compat.spconv_available() and 'FSDLITE_NO_SPCONV' in compat.spconv_unavailable_reason()
    net.load_state_dict(state, strict=True)
    assert net.resolved_conv_backend(torch.zeros(1, 5)) == 'fsdlite'
    feats, coors = _voxels(60, 9)
    with torch.no_grad():
        got = net(feats, coors, 2)
    net.conv_backend = 'spconv'
    with pytest.raises(RuntimeError, match="conv_backend='spconv'.*FSDLITE_NO_SPCONV=1 is set.*use 'auto' or "
                                           "'fsdlite'"):
        net(feats, coors, 2)
    monkeypatch.delenv(compat.NO_SPCONV_ENV)
    with torch.no_grad():
        want = spconv_unet_forward(net, feats, coors, 2)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_without_spconv_import_spconv_names_the_way_out(monkeypatch):
    monkeypatch.setenv(compat.NO_SPCONV_ENV, '1')
    with pytest.raises(ImportError, match="FSDLITE_NO_SPCONV=1 is set.*conv_backend='auto' or 'fsdlite'"):
        compat.import_spconv()


@pytest.mark.cuda
@pytest.mark.parametrize('no_spconv', [False, True])
def test_auto_backend_on_cuda_without_spconv_runs_fsdlite_kernels(monkeypatch, no_spconv):
    """On CUDA 'auto' runs fsdlite's kernels when spconv is missing (or FSDLITE_NO_SPCONV=1): forward and backward
    agree with the CPU."""
    if no_spconv:
        monkeypatch.setenv(compat.NO_SPCONV_ENV, '1')
    elif compat.spconv_available():
        pytest.skip('spconv imports here: the spconv case is test_auto_backend_uses_spconv_on_cuda...')
    torch.manual_seed(4)
    net = SparseUNet(5, **GRID, **SMALL).double()
    feats, coors = _voxels(70, 10)
    feats = feats.double()
    outs = []
    for device in ('cpu', 'cuda'):
        net = net.to(device)
        assert net.resolved_conv_backend(feats.to(device)) == 'fsdlite'
        x = feats.to(device).requires_grad_()
        net.zero_grad()
        out = net(x, coors.to(device), 2)
        out.square().sum().backward()
        outs.append([out.detach().cpu(), x.grad.cpu()] + [p.grad.cpu() for p in net.parameters()])
    for a, b in zip(*outs):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-9)


@pytest.mark.cuda
def test_auto_backend_uses_spconv_on_cuda_and_fsdlite_kernels_agree():
    if not compat.spconv_available():
        pytest.skip(f'needs spconv: {compat.spconv_unavailable_reason()}')
    ours, theirs = _twin_nets(2)
    ours.conv_backend = 'auto'
    feats, coors = _voxels(60, 8)
    net = ours.cuda().eval()
    assert net.resolved_conv_backend(feats.cuda()) == 'spconv'
    with torch.no_grad():
        want = spconv_unet_forward(net, feats.cuda(), coors.cuda(), 2)
        assert torch.allclose(net(feats.cuda(), coors.cuda(), 2), want, atol=1e-4)
        net.conv_backend = 'fsdlite'
        assert torch.allclose(net(feats.cuda(), coors.cuda(), 2), want, atol=1e-4)


def test_bad_conv_backend():
    with pytest.raises(ValueError, match=r"conv_backend must be one of \('auto', 'fsdlite', 'spconv'\), got 'cuda'"):
        SparseUNet(5, **GRID, **SMALL, conv_backend='cuda')


def test_using_conv_backend_sets_the_backend_and_hooks_see_every_conv():
    """Module hooks see each conv layer whatever the backend (the slim tracer and the cost counter rely on it);
    inside ``using_conv_backend(model, backend)`` every SparseUNet uses that backend, and the backend chosen before
    comes back afterwards, also after an error."""
    outer = torch.nn.Sequential(SparseUNet(5, **GRID, **SMALL), SparseUNet(5, **GRID, **SMALL, conv_backend='fsdlite'))
    feats, coors = _voxels(30, 9)
    calls = []
    outer[0].conv_input[0].register_forward_hook(lambda *args: calls.append(1))
    outer[0](feats, coors, 2)
    assert calls == [1]
    with pytest.raises(RuntimeError, match='stop'):
        with using_conv_backend(outer, 'spconv'):
            assert [m.conv_backend for m in outer] == ['spconv', 'spconv']
            outer[0](feats, coors, 2)
            raise RuntimeError('stop')
    assert calls == [1, 1]
    assert [m.conv_backend for m in outer] == ['auto', 'fsdlite']
