"""SparseTensor: kernel maps cached by key and shared, the map's backend (fsdlite / spconv kernels), clear errors."""
import pytest
import torch

from fsdlite.models.layers.pair_conv import pairs_from_exact
from fsdlite.models.layers.sparse_block import sparse_conv_block
from fsdlite.models.layers.sparse_conv import KernelMap, RulebookSparseConv3d, resolve_backend, sparse_conv
from fsdlite.models.layers.sparse_tensor import SparseTensor, given_map, map_key
from fsdlite.ops import subm_offset_pairs, voxel_keys
from fsdlite.utils import compat

SHAPE = (6, 7, 8)


def _tensor(n=80, seed=0, channels=4, backend='fsdlite'):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randperm(2 * 6 * 7 * 8, generator=g)[:n].sort().values
    b, rest = keys // (6 * 7 * 8), keys % (6 * 7 * 8)
    coords = torch.stack([b, rest // 56, (rest // 8) % 7, rest % 8], 1)
    return SparseTensor(torch.randn(n, channels, generator=g), coords, SHAPE, 2, backend=backend)


def test_layers_sharing_a_key_share_one_kernel_map():
    x = _tensor()
    a = RulebookSparseConv3d(4, 6, 3, padding=1, subm=True, indice_key='s1')
    b = RulebookSparseConv3d(6, 4, 3, padding=1, subm=True, indice_key='s1')
    y = a(x)
    map_a, _ = x.kernel_map(a.geometry)
    map_b, out = y.kernel_map(b.geometry)
    assert map_a is map_b and out.coords is x.coords and y.cache is x.cache
    assert len(x.cache) == 1 and map_key(a.geometry, (1, 1, 1)) in x.cache
    other = RulebookSparseConv3d(4, 4, 3, padding=1, subm=True, indice_key='s2')
    assert x.kernel_map(other.geometry)[0] is not map_a  # another key: its own map
    reference = subm_offset_pairs(x.coords, SHAPE, 3)
    assert torch.equal(map_a.pairs, reference.pairs) and map_a.layout == 'exact' and map_a.backend == 'fsdlite'


def test_strided_and_inverse_maps_and_voxels():
    x = _tensor(60, 1)
    down = RulebookSparseConv3d(4, 8, 3, 2, 1, indice_key='d2', record_voxel_count=True)
    up = RulebookSparseConv3d(8, 4, 3, inverse=True, indice_key='d2')
    y = down(x)
    assert y.stride == (2, 2, 2) and y.spatial_shape == (3, 4, 4) and y.features.shape == (y.coords.shape[0], 8)
    assert int(down.max_num_voxels_during_training) == y.coords.shape[0]
    z = up(y)
    assert z.coords is x.coords and z.stride == (1, 1, 1) and z.spatial_shape == SHAPE
    strided, _ = x.kernel_map(down.geometry)
    inverse, _ = y.kernel_map(up.geometry)
    assert torch.equal(inverse.pairs, strided.pairs.flip(0))  # sorted voxels: the swap is already in order
    assert (inverse.num_in, inverse.num_out) == (strided.num_out, strided.num_in)
    assert y.kernel_map(up.geometry)[0] is inverse
    with pytest.raises(ValueError, match="inverse conv with indice_key 'zz' needs the strided conv"):
        up_other = RulebookSparseConv3d(8, 4, 3, inverse=True, indice_key='zz')
        up_other(y)


def test_a_key_reused_on_other_voxels_is_an_error():
    x = _tensor(50, 2)
    conv = RulebookSparseConv3d(4, 4, 3, padding=1, subm=True, indice_key='s')
    conv(x)
    moved = x._on(x.features, x.coords.flip(0), x.spatial_shape, x.stride)
    with pytest.raises(ValueError, match='was built on other voxels'):
        conv(moved)


@pytest.mark.parametrize('make, match', [
    (lambda f, c: SparseTensor(f, c[:, :3], SHAPE, 1), r'coords must be an integer \(N, 4\)'),
    (lambda f, c: SparseTensor(f, c.float(), SHAPE, 1), r'coords must be an integer \(N, 4\)'),
    (lambda f, c: SparseTensor(f[:-1], c, SHAPE, 1), r'features must have shape \(80, C\)'),
    (lambda f, c: SparseTensor(f, c, SHAPE[:2], 1), 'spatial_shape and stride need 3 entries'),
    (lambda f, c: SparseTensor(f, c, SHAPE, 1, backend='cuda'), "backend must be one of .* got 'cuda'"),
])
def test_bad_arguments_name_what_is_wrong(make, match):
    x = _tensor()
    with pytest.raises(ValueError, match=match):
        make(x.features, x.coords)


def test_conv_module_inputs_are_checked():
    x = _tensor()
    conv = RulebookSparseConv3d(4, 4, 3, padding=1, subm=True)
    with pytest.raises(ValueError, match='plain .* tensor input needs its kernel_map'):
        conv(x.features)
    kmap, _ = x.kernel_map(conv.geometry)
    with pytest.raises(ValueError, match='kernel_map is for plain-tensor inputs'):
        conv(x, kmap)
    torch.testing.assert_close(conv(x.features, kmap), conv(x).features)


@pytest.mark.parametrize('subm', [True, False])
def test_spconv_backend_runs_spconv_kernels_on_the_same_map(subm):
    """A tensor with backend 'spconv' builds its exact maps with spconv's pair form; spconv's kernels give fsdlite's
    result, forward and backward, and spconv's own layer's."""
    spconv = compat.import_spconv()
    torch.manual_seed(3)
    conv = RulebookSparseConv3d(4, 6, 3, 1 if subm else 2, 1, subm=subm, indice_key='k')
    outs = []
    for backend in ('fsdlite', 'spconv'):
        x = _tensor(70, 4, backend=backend)
        x.features.requires_grad_()
        kmap, _ = x.kernel_map(conv.geometry)
        assert kmap.backend == backend and x.backend == backend
        conv.zero_grad()
        y = conv(x)
        y.features.square().sum().backward()
        outs.append((y.features.detach(), x.features.grad, conv.weight.grad.clone()))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    x = _tensor(70, 4)
    layer = (spconv.SubMConv3d if subm else spconv.SparseConv3d)(4, 6, 3, stride=1 if subm else 2, padding=1,
                                                                  bias=True, indice_key='k')
    layer.load_state_dict(conv.state_dict())
    theirs = layer(spconv.SparseConvTensor(x.features, x.coords.int(), list(SHAPE), 2))
    # spconv's strided outputs come in its own order, fsdlite's sorted by (b, z, y, x)
    order = torch.argsort(voxel_keys(theirs.indices, theirs.spatial_shape))
    torch.testing.assert_close(outs[0][0], theirs.features.detach()[order], atol=1e-5, rtol=1e-5)


def test_spconv_map_form_and_transpose():
    x = _tensor(40, 5)
    kmap = subm_offset_pairs(x.coords, SHAPE, 3)
    native = kmap.on_spconv()
    pairs, counts = native.native
    assert pairs.shape[:2] == (2, 27) and pairs.dtype == counts.dtype == torch.int32
    assert torch.equal(counts.long(), kmap.offset_starts[1:] - kmap.offset_starts[:-1])
    k = 5
    got = pairs[:, k, :int(counts[k])].long()
    assert torch.equal(got, kmap.pairs[:, kmap.offset_starts[k]:kmap.offset_starts[k + 1]])
    assert (pairs[:, k, int(counts[k]):] == -1).all()
    assert torch.equal(native.transposed().native[0], pairs.flip(0))
    w = torch.randn(27, 4, 3)
    torch.testing.assert_close(sparse_conv(x.features, native, w), sparse_conv(x.features, kmap, w))
    dense = KernelMap.dense(torch.zeros(3, 27, dtype=torch.long), 3)
    with pytest.raises(ValueError, match='only an exact map runs on spconv, this one is dense'):
        dense.on_spconv()


def test_backend_resolution(monkeypatch):
    assert resolve_backend('auto', 'cpu') == 'fsdlite' and resolve_backend('spconv', 'cpu') == 'spconv'
    with pytest.raises(ValueError, match=r"backend must be one of \('auto', 'fsdlite', 'spconv'\), got 'gpu'"):
        resolve_backend('gpu', 'cpu')
    monkeypatch.setenv(compat.NO_SPCONV_ENV, '1')
    with pytest.raises(RuntimeError, match="'spconv' cannot run: FSDLITE_NO_SPCONV=1 is set"):
        resolve_backend('spconv', 'cpu')


def test_block_folds_its_norm_on_a_sparse_tensor():
    torch.manual_seed(0)
    block = sparse_conv_block('SubMConv3d', 4, 6, indice_key='s')
    with torch.no_grad():
        block[1].running_mean.uniform_(-1, 1)
        block[1].running_var.uniform_(0.5, 2)
    block.eval()
    x = _tensor()
    expected = block(x).features  # gradients enabled: conv, norm and act called as modules
    with torch.no_grad():
        folded = block(x)
    assert folded.coords is x.coords
    torch.testing.assert_close(folded.features, expected, atol=1e-5, rtol=1e-5)


def test_given_maps_run_a_tensor_without_coords_as_the_built_ones():
    """A fixed-shape run hands the maps in (``given_map``): the same convs on the same maps give the same features,
    the output strides and grids follow the geometry, a padded map does not touch the voxel-count buffer, and a
    conv whose map was not given is a clear error."""
    x = _tensor(60, 2)
    down = RulebookSparseConv3d(4, 8, 3, 2, 1, indice_key='d2', record_voxel_count=True)
    up = RulebookSparseConv3d(8, 4, 3, inverse=True, indice_key='d2')
    expected = up(down(x))
    strided, y = x.kernel_map(down.geometry)
    inverse, _ = y.kernel_map(up.geometry)
    count = int(down.max_num_voxels_during_training)
    def padded(kmap, num_in, num_out):  # as the pre-ops hand maps in: tiled pairs, rows padded to capacities
        pairs = pairs_from_exact(kmap, num_in, num_out, int(kmap.pairs.shape[1]) + 50, tile=8).pairs
        return KernelMap.tiled(pairs, num_in, num_out, tile=8)

    rows = y.coords.shape[0] + 5  # the level's capacity
    cache = {map_key(down.geometry, (1, 1, 1)): given_map(padded(strided, 60, rows), SHAPE, y.spatial_shape,
                                                          (1, 1, 1), y.stride),
             map_key(up.geometry, y.stride): given_map(padded(inverse, rows, 60), y.spatial_shape, SHAPE, y.stride,
                                                       (1, 1, 1))}
    given = SparseTensor(x.features, None, SHAPE, None, backend='fsdlite', cache=cache)
    mid = down(given)
    assert mid.coords is None and mid.stride == y.stride and mid.spatial_shape == y.spatial_shape
    assert mid.features.shape == (rows, 8)
    torch.testing.assert_close(up(mid).features, expected.features)
    assert int(down.max_num_voxels_during_training) == count
    other = RulebookSparseConv3d(4, 4, 3, padding=1, subm=True, indice_key='s9')
    with pytest.raises(ValueError, match='no kernel map of key .* was given'):
        other(given)
