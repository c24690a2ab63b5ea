"""RulebookSparseConv3d / sparse_conv on dense kernel maps: equality with spconv (SubMConv3d, SparseConv3d,
SparseInverseConv3d; forward and gradients), with dense F.conv3d / conv_transpose3d, strict state_dict loading,
rulebook caching by indice_key, bounds, ONNX export with the rulebook as a graph input."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F

from fsdlite.models.layers.rulebook_conv import (build_rulebook, conv_geometry, inverse_rulebook, kernel_matrices,
                                                 output_grid)
from fsdlite.models.layers.sparse_conv import KernelMap, RulebookSparseConv3d, conv_module_forward, sparse_conv
from fsdlite.ops import voxelize
from fsdlite.deploy.translations import custom_translations
from fsdlite.structures.bounds import BoundExceededError
from fsdlite.utils import compat

SHAPE = (7, 12, 10)


@pytest.fixture(scope='module')
def spconv():
    return compat.import_spconv()


def dense_map(nbr, feats):
    """The neighbour map ``nbr`` over the rows of ``feats`` as a dense kernel map."""
    return KernelMap.dense(nbr, feats.shape[0])


def random_input(shape=SHAPE, batches=2, density=0.25, channels=4, pad=6, seed=0, dtype=torch.float32):
    """Voxels in random order + padded copies (padding coordinates 0, padding features huge garbage)."""
    g = torch.Generator().manual_seed(seed)
    coors = torch.nonzero(torch.rand(batches, *shape, generator=g) < density)
    coors = coors[torch.randperm(coors.shape[0], generator=g)]
    feats = torch.randn(coors.shape[0], channels, generator=g, dtype=dtype)
    padded_coors = torch.cat([coors, torch.zeros(pad, 4, dtype=torch.long)])
    padded_feats = torch.cat([feats, torch.full((pad, channels), 1e6, dtype=dtype)])
    return coors, feats, padded_coors, padded_feats


def randomize(module, seed=0):
    """Random weights (std 1 / sqrt(fan_in): activations stay O(1) through a chain) and biases."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            scale = (p.numel() / p.shape[0]) ** -0.5 if p.dim() > 1 else 0.3
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return module


def sort_rows(coors):
    key = ((coors[:, 0] * 4096 + coors[:, 1]) * 4096 + coors[:, 2]) * 4096 + coors[:, 3]
    return torch.argsort(key)


def spconv_chain(spconv):
    """SubM(k3) -> SparseConv(k3 s2 p1) -> SubM -> SparseInverseConv -> SubM(k1): a UNet in miniature."""
    return [randomize(m, i) for i, m in enumerate([
        spconv.SubMConv3d(4, 8, 3, indice_key='subm1', bias=True),
        spconv.SparseConv3d(8, 16, 3, 2, 1, indice_key='down2', bias=False),
        spconv.SubMConv3d(16, 16, 3, indice_key='subm2', bias=False),
        spconv.SparseInverseConv3d(16, 8, 3, indice_key='down2', bias=True),
        spconv.SubMConv3d(8, 5, 1, indice_key='subm1x', bias=True)])]


def run_chain_static(layers, coors, num_valid, feats, shape, max_out, wrap=False):
    strided, rbs, x = {}, [], feats
    c, n, s = coors, num_valid, shape
    for layer in layers:
        g = conv_geometry(layer)
        if g.kind == 'inverse':  # the strided conv's map transposed, onto its input voxels and grid
            rb_strided, (ic, inum, ishape) = strided[g.indice_key]
            rb, grid = inverse_rulebook(rb_strided, ic, inum), ishape
        else:
            rb, grid = build_rulebook(layer, c, n, s, max_out=max_out), output_grid(layer, s)
            if g.kind == 'conv':
                strided[g.indice_key] = (rb, (c, n, s))
        kmap = dense_map(rb.nbr, x)
        x = RulebookSparseConv3d.from_spconv(layer)(x, kmap) if wrap else conv_module_forward(layer, x, kmap)
        c, n, s = rb.out_coors, rb.num_valid_out, grid
        rbs.append(rb)
    return x, rbs


@pytest.mark.parametrize('wrap', [False, True])
def test_chain_matches_spconv(spconv, wrap):
    coors, feats, pc, pf = random_input()
    layers = spconv_chain(spconv)
    st = spconv.SparseConvTensor(feats, coors.int(), list(SHAPE), 2)
    outs = []
    with torch.no_grad():
        for layer in layers:
            st = layer(st)
            outs.append(st)
        x, rbs = run_chain_static(layers, pc, coors.shape[0], pf, SHAPE, max_out=coors.shape[0], wrap=wrap)
    mid = outs[1]
    n_mid = int(rbs[1].num_valid_out)
    order = sort_rows(mid.indices.long())
    assert n_mid == mid.indices.shape[0] and torch.equal(rbs[1].out_coors[:n_mid], mid.indices.long()[order])
    assert output_grid(layers[1], SHAPE) == tuple(mid.spatial_shape)
    assert x.shape == (pc.shape[0], 5)
    torch.testing.assert_close(x[:coors.shape[0]], outs[-1].features, rtol=1e-5, atol=1e-5)


def test_chain_on_the_kitti_frame(spconv, shared_data):
    pts = torch.from_numpy(np.fromfile(shared_data / 'kitti_object_000008' / '000008.bin', np.float32).reshape(-1, 4))
    size, prange = [0.4, 0.4, 0.4], [0, -40, -3, 70.4, 40, 1]
    vox = voxelize(pts, size, prange)
    shape = (10, 200, 176)
    v = vox.voxel_coors.shape[0]
    feats = torch.zeros(v, 4).index_add_(0, vox.point2voxel[vox.point2voxel >= 0], pts[vox.point2voxel >= 0])
    layers = spconv_chain(spconv)
    st = spconv.SparseConvTensor(feats, vox.voxel_coors.int(), list(shape), 1)
    with torch.no_grad():
        for layer in layers:
            st = layer(st)
        pad = torch.cat([vox.voxel_coors, torch.zeros(100, 4, dtype=torch.long)])
        x, _ = run_chain_static(layers, pad, v, torch.cat([feats, torch.zeros(100, 4)]), shape, max_out=v)
    assert v > 2000
    torch.testing.assert_close(x[:v], st.features, rtol=1e-4, atol=1e-4)


def dense(coors, feats, shape, batches=2):
    out = torch.zeros(batches, feats.shape[1], *shape, dtype=feats.dtype)
    out[coors[:, 0], :, coors[:, 1], coors[:, 2], coors[:, 3]] = feats
    return out


def at(dense_out, coors):
    return dense_out[coors[:, 0], :, coors[:, 1], coors[:, 2], coors[:, 3]]


@pytest.mark.parametrize('kernel, stride, padding, dilation', [(3, 1, 1, 1), (3, 1, 2, 2), (5, 1, 2, 1),
                                                               (3, 2, 1, 1), (2, 2, 0, 1), ((3, 1, 3), (2, 1, 2),
                                                                                            (1, 0, 1), 1)])
def test_matches_dense_conv3d(kernel, stride, padding, dilation):
    """Submanifold (stride 1, 'same' padding) = dense conv at the input sites; strided = dense conv at the
    output sites; inverse = dense conv_transpose3d at the strided conv's input sites (independent of spconv)."""
    coors, feats, pc, pf = random_input(seed=3)
    n = coors.shape[0]
    subm = stride == 1
    conv = randomize(RulebookSparseConv3d(4, 6, kernel, stride, padding, dilation, subm=subm, indice_key='a'))
    w = conv.weight.permute(0, 4, 1, 2, 3)  # (Cout, Cin, kz, ky, kx)
    ref = F.conv3d(dense(coors, feats, SHAPE), w, conv.bias, stride, padding, dilation)
    rb = build_rulebook(conv, pc, n, SHAPE, max_out=4 * n)
    out = conv(pf, dense_map(rb.nbr, pf))
    m = int(rb.num_valid_out)
    rows = coors if subm else rb.out_coors[:m]
    torch.testing.assert_close(out[:m], at(ref, rows), rtol=1e-5, atol=1e-5)
    if subm:
        return
    # every dense output site that is non-zero without bias is an output voxel
    assert int((F.conv3d(dense(coors, feats.abs() + 1, SHAPE), w.abs(), None, stride, padding, dilation)
                .sum(1) > 0).sum()) == m
    inverse = randomize(RulebookSparseConv3d(6, 4, kernel, indice_key='a', inverse=True), 1)
    grid = output_grid(conv, SHAPE)
    inv_rb = inverse_rulebook(rb, pc, n)
    assert torch.equal(inv_rb.out_coors, pc) and int(inv_rb.num_valid_out) == n
    y = inverse(out, dense_map(inv_rb.nbr, out))
    geometry = [[v] * 3 if isinstance(v, int) else list(v) for v in (kernel, stride, padding, dilation)]
    reach = [(o - 1) * s - 2 * p + d * (k - 1) + 1 for o, k, s, p, d in zip(grid, *geometry)]
    up = F.conv_transpose3d(dense(rb.out_coors[:m], out[:m], grid),
                            inverse.weight.permute(4, 0, 1, 2, 3), inverse.bias, stride, padding,
                            output_padding=[a - b for a, b in zip(SHAPE, reach)], dilation=dilation)
    torch.testing.assert_close(y[:n], at(up, coors), rtol=1e-5, atol=1e-5)
    assert torch.equal(inv_rb.out_coors, pc) and int(inv_rb.num_valid_out) == n


def test_gradients_match_spconv(spconv):
    coors, feats, pc, pf = random_input(seed=5)
    n = coors.shape[0]
    layers = spconv_chain(spconv)[:4]
    feats_sp = feats.clone().requires_grad_(True)
    st = spconv.SparseConvTensor(feats_sp, coors.int(), list(SHAPE), 2)
    for layer in layers:
        st = layer(st)
    target = torch.randn(st.features.shape, generator=torch.Generator().manual_seed(1))
    (st.features * target).sum().backward()
    sp_grads = [feats_sp.grad] + [p.grad.clone() for layer in layers for p in layer.parameters()]
    for layer in layers:
        layer.zero_grad()
    pf = pf.clone().requires_grad_(True)
    x, _ = run_chain_static(layers, pc, n, pf, SHAPE, max_out=n)
    (x[:n] * target).sum().backward()
    ours = [pf.grad[:n]] + [p.grad for layer in layers for p in layer.parameters()]
    assert bool((pf.grad[n:] == 0).all())  # padding rows are never read
    for a, b in zip(ours, sp_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_gradcheck_float64():
    coors, feats, pc, pf = random_input(shape=(3, 3, 4), batches=1, density=0.4, channels=2, pad=2, seed=7,
                                        dtype=torch.float64)
    conv = RulebookSparseConv3d(2, 2, 3, 2, 1, indice_key='g').double()
    rb = build_rulebook(conv, pc, coors.shape[0], (3, 3, 4), max_out=12)
    for mode in ('matmul', 'loop'):
        assert torch.autograd.gradcheck(lambda x, w, b: sparse_conv(x, dense_map(rb.nbr, x), kernel_matrices(w), b,
                                                                    mode=mode),
                                        (pf.clone().requires_grad_(), conv.weight.detach().clone().requires_grad_(),
                                         conv.bias.detach().clone().requires_grad_()))


@pytest.mark.parametrize('subm', [True, False])
def test_modes_agree(subm):
    coors, feats, pc, pf = random_input(seed=9, channels=8)
    conv = RulebookSparseConv3d(8, 16, 3, 1 if subm else 2, 0 if subm else 1, subm=subm)
    nbr = build_rulebook(conv, pc, coors.shape[0], SHAPE, max_out=coors.shape[0]).nbr
    expected = conv(pf, dense_map(nbr, pf), mode='matmul')
    for mode in ('loop', 'auto'):
        torch.testing.assert_close(conv(pf, dense_map(nbr, pf), mode=mode), expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------ state_dict
def test_spconv_state_dict_loads_strictly_both_ways(spconv):
    pairs = [
        (spconv.SubMConv3d(4, 8, 3, indice_key='s', bias=False), dict(subm=True, bias=False, indice_key='s')),
        (spconv.SparseConv3d(4, 8, 3, 2, 1, record_voxel_count=True), dict(stride=2, padding=1,
                                                                           record_voxel_count=True)),
        (spconv.SparseInverseConv3d(8, 4, 3, indice_key='d'), dict(inverse=True, indice_key='d')),
    ]
    for sp_layer, kwargs in pairs:
        randomize(sp_layer)
        ours = RulebookSparseConv3d(sp_layer.in_channels, sp_layer.out_channels, 3, **kwargs)
        ours.load_state_dict(sp_layer.state_dict(), strict=True)
        assert list(ours.state_dict()) == list(sp_layer.state_dict())
        assert ours.weight.shape == sp_layer.weight.shape == (sp_layer.out_channels, 3, 3, 3, sp_layer.in_channels)
        sp_layer.load_state_dict(randomize(ours, 3).state_dict(), strict=True)
        assert torch.equal(sp_layer.weight, ours.weight)
        assert conv_geometry(ours) == conv_geometry(sp_layer)


def test_record_voxel_count_buffer_tracks_the_largest_output():
    coors, _, pc, _ = random_input(seed=2)
    conv = RulebookSparseConv3d(4, 4, 3, 2, 1, record_voxel_count=True)
    rb = build_rulebook(conv, pc, coors.shape[0], SHAPE, max_out=coors.shape[0])
    assert int(conv.max_num_voxels_during_training) == int(rb.num_valid_out) > 0


# --------------------------------------------------------------------------------------- rulebook reuse
def test_build_rulebook_bounds_and_errors():
    coors, _, pc, _ = random_input(seed=4)
    n = coors.shape[0]
    down = RulebookSparseConv3d(4, 4, 3, 2, 1, indice_key='d2')
    with pytest.raises(ValueError, match='needs max_out'):
        build_rulebook(down, pc, n, SHAPE)
    with pytest.raises(BoundExceededError, match=r'bound max_voxels\[1\] exceeded: needed \d+, allowed 5'):
        build_rulebook(down, pc, n, SHAPE, max_out=5, bound_name='max_voxels[1]')
    cut = build_rulebook(down, pc, n, SHAPE, max_out=5, strict=False)
    full = build_rulebook(down, pc, n, SHAPE, max_out=n)
    assert int(cut.num_valid_out) == 5 and int(cut.num_dropped) == int(full.num_valid_out) - 5
    inverse = RulebookSparseConv3d(4, 4, 3, inverse=True, indice_key='d2')
    with pytest.raises(ValueError, match='an inverse conv .* takes its strided conv.s map transposed'):
        build_rulebook(inverse, pc, n, SHAPE)
    with pytest.raises(ValueError, match="output_grid: an inverse conv \\(indice_key='d2'\\) writes its strided"):
        output_grid(inverse, SHAPE)
    with pytest.raises(ValueError, match='an inverse conv needs the indice_key'):
        RulebookSparseConv3d(4, 4, 3, inverse=True)
    with pytest.raises(TypeError, match='is not a sparse conv'):
        build_rulebook(torch.nn.Linear(2, 2), pc, n, SHAPE)


def test_dense_map_conv_invalid_arguments():
    w = kernel_matrices(torch.zeros(3, 3, 3, 3, 2))
    with pytest.raises(ValueError, match=r'x must have shape \(Vin, 2\)'):
        sparse_conv(torch.zeros(4, 3), KernelMap.dense(torch.zeros(4, 27, dtype=torch.long), 4), w)
    with pytest.raises(ValueError, match=r'nbr must have shape \(Vout, 27\)'):
        sparse_conv(torch.zeros(4, 2), KernelMap.dense(torch.zeros(4, 9, dtype=torch.long), 4), w)
    with pytest.raises(ValueError, match=r'nbr contains 5, expected values in \[0, 5\)'):
        sparse_conv(torch.zeros(4, 2), KernelMap.dense(torch.full((1, 27), 5), 4), w)
    with pytest.raises(ValueError, match="mode must be 'auto', 'matmul' or 'loop'"):
        sparse_conv(torch.zeros(4, 2), KernelMap.dense(torch.zeros(1, 27, dtype=torch.long), 4), w, mode='fast')


# ----------------------------------------------------------------------------------------------- ONNX
class TwoConvs(torch.nn.Module):
    """SubM conv ('matmul' mode) + ReLU + strided conv ('loop' mode), both neighbour maps graph inputs."""

    def __init__(self):
        super().__init__()
        self.subm = RulebookSparseConv3d(4, 8, 3, subm=True, indice_key='s')
        self.down = RulebookSparseConv3d(8, 16, 3, 2, 1, indice_key='d')

    def forward(self, feats, nbr_subm, nbr_down):
        x = torch.relu(self.subm(feats, dense_map(nbr_subm, feats), mode='matmul'))
        return self.down(x, dense_map(nbr_down, x), mode='loop')


def test_onnx_export_with_rulebook_inputs(tmp_path):
    coors, feats, pc, pf = random_input(seed=11)
    n = coors.shape[0]
    model = randomize(TwoConvs()).eval()
    nbr_s = build_rulebook(model.subm, pc, n, SHAPE).nbr
    nbr_d = build_rulebook(model.down, pc, n, SHAPE, max_out=n).nbr
    path = tmp_path / 'conv.onnx'
    torch.onnx.export(model, (pf, nbr_s, nbr_d), str(path), dynamo=True, opset_version=18, external_data=False,
                      custom_translation_table=custom_translations())
    graph = onnx.load(str(path))
    ops = {(n.domain, n.op_type) for n in graph.graph.node}
    assert {d for d, _ in ops} <= {'', 'ai.onnx'} and {'MatMul', 'Gemm'} & {t for _, t in ops}, ops
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    names = [i.name for i in session.get_inputs()]
    (got,) = session.run(None, dict(zip(names, [pf.numpy(), nbr_s.numpy(), nbr_d.numpy()])))
    with torch.no_grad():
        expected = model(pf, nbr_s, nbr_d)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)
