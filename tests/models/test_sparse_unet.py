"""SparseUNet: output voxel layout equals the input layout, configurable stages, gradients, bad configs."""
import pytest
import torch

from fsdlite.models.backbones import SparseUNet
from fsdlite.models.layers.sparse_conv import RulebookSparseConv3d
from fsdlite.models.layers.sparse_block import is_spconv_module
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
    net = SparseUNet(5, **GRID, **SMALL, conv_backend='spconv').eval()
    feats, coors = _voxels(40, 2)
    seen = {}

    def record(module, args, output):
        seen['indices'] = output.indices

    net.upsample[-1].register_forward_hook(record)
    net(feats, coors, 2)
    assert torch.equal(seen['indices'].long(), coors)


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
    assert net.encoder[1][0][0].__class__.__name__ == 'SparseConv3d'
    assert net.upsample[0][0].__class__.__name__ == 'SparseInverseConv3d'
    assert net.upsample[1][0].__class__.__name__ == 'SubMConv3d'
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


# ------------------------------------------------------------------- conv_backend='fsdlite' (fused kernels)
def _twin_nets(seed=0):
    torch.manual_seed(seed)
    ours = SparseUNet(5, **GRID, **SMALL, conv_backend='fsdlite')
    theirs = SparseUNet(5, **GRID, **SMALL, conv_backend='spconv')
    theirs.load_state_dict(ours.state_dict())
    with torch.no_grad():  # non-trivial norm statistics and biases, so eval mode tests them too
        for a, b in zip(ours.modules(), theirs.modules()):
            if isinstance(a, torch.nn.BatchNorm1d):
                for t in (a.running_mean, a.running_var, a.weight, a.bias):
                    t.uniform_(0.5, 1.5)
                b.load_state_dict(a.state_dict())
    return ours, theirs


def test_fsdlite_backend_matches_spconv_on_scattered_voxels():
    """Scattered voxels: a strided conv has more than twice its input voxels (every output is kept, the pairs of
    every conv equal spconv's rulebooks, so the result equals spconv's)."""
    ours, theirs = (net.eval() for net in _twin_nets())
    feats, coors = _voxels(40, 6)
    got = ours(feats, coors, 2)
    assert torch.allclose(got, theirs(feats, coors, 2), atol=1e-5)
    plan = ours.conv_plan()
    maps, order = plan.sorted_kernel_maps(coors)
    assert order is not None  # random row order: sorted first
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
        reference = theirs(feats, coors, 2)
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


def test_without_spconv_the_layers_are_fsdlite_s_and_load_spconv_weights(monkeypatch):
    """FSDLITE_NO_SPCONV=1 (what a machine without spconv does): the UNet is built from RulebookSparseConv3d layers
    with spconv's state_dict keys and shapes, 'auto' runs fsdlite's kernels on every device, 'spconv' says why it
    cannot run, and the outputs equal the spconv-built network's with the same weights."""
    spconv_net = _twin_nets(3)[1].eval()
    monkeypatch.setenv(compat.NO_SPCONV_ENV, '1')
    assert not compat.spconv_available() and 'FSDLITE_NO_SPCONV' in compat.spconv_unavailable_reason()
    net = SparseUNet(5, **GRID, **SMALL)
    assert not is_spconv_module(net)
    assert any(isinstance(m, RulebookSparseConv3d) for m in net.modules())
    state = spconv_net.state_dict()
    assert {k: v.shape for k, v in net.state_dict().items()} == {k: v.shape for k, v in state.items()}
    net.load_state_dict(state, strict=True)
    net.eval()
    assert net.resolved_conv_backend(torch.zeros(1, 5)) == 'fsdlite'
    feats, coors = _voxels(60, 9)
    with torch.no_grad():
        got = net(feats, coors, 2)
    monkeypatch.delenv(compat.NO_SPCONV_ENV)
    with torch.no_grad():
        want = spconv_net(feats, coors, 2)
    assert torch.allclose(got, want, atol=1e-5)
    net.conv_backend = 'spconv'
    with pytest.raises(RuntimeError, match="conv_backend='spconv'.* built without spconv.*use conv_backend='auto'"):
        net(feats, coors, 2)


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
    want = net(feats.cuda(), coors.cuda(), 2)
    net.conv_backend = 'fsdlite'
    assert torch.allclose(net(feats.cuda(), coors.cuda(), 2), want, atol=1e-4)


def test_bad_conv_backend():
    with pytest.raises(ValueError, match=r"conv_backend must be one of \('auto', 'spconv', 'fsdlite'\), got 'cuda'"):
        SparseUNet(5, **GRID, **SMALL, conv_backend='cuda')


def test_dynamic_path_calls_the_conv_layers_as_modules():
    """Inside ``dynamic_path`` every SparseUNet runs on spconv (module hooks see each conv layer: the slim tracer
    and the cost counter rely on it); the backend chosen before comes back afterwards, also after an error."""
    from fsdlite.models.detectors.static import dynamic_path
    outer = torch.nn.Sequential(SparseUNet(5, **GRID, **SMALL), SparseUNet(5, **GRID, **SMALL, conv_backend='fsdlite'))
    feats, coors = _voxels(30, 9)
    calls = []
    outer[0].conv_input[0].register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        outer[0](feats, coors, 2)
    assert not calls  # 'auto' for CPU inference: fused kernels, the module itself is not called
    with pytest.raises(RuntimeError, match='stop'):
        with dynamic_path(outer):
            assert [m.conv_backend for m in outer] == ['spconv', 'spconv']
            with torch.no_grad():
                outer[0](feats, coors, 2)
            raise RuntimeError('stop')
    assert calls == [1]
    assert [m.conv_backend for m in outer] == ['auto', 'fsdlite']
