"""The cost counter: exact dense counts, sparse convs counted from the real rulebook (never 0, no crash)."""
import torch
from torch import nn

from fsdlite.slim.cost import MacCounter, count_macs, sparse_conv_pairs


def test_dense_layers_are_counted_exactly(slim_kit):
    body = nn.Sequential(nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 3, bias=False))
    total, by_op, uncounted = count_macs(slim_kit.Wrap(body), dict(inputs=torch.randn(11, 7)))
    assert total == 11 * 7 * 5 + 11 * 5 * 3
    assert not uncounted


def _sparse_input(spconv, n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    coors = torch.unique(torch.randint(0, 6, (n, 3), generator=g), dim=0)
    coors = torch.cat([torch.zeros(len(coors), 1, dtype=torch.long), coors], 1).int()
    return spconv.SparseConvTensor(torch.randn(len(coors), 4, generator=g), coors.contiguous(), [6, 6, 6], 1)


class SparseNet(nn.Module):
    def __init__(self, spconv):
        super().__init__()
        self.subm = spconv.SubMConv3d(4, 8, 3, padding=1, bias=False, indice_key='s1')
        self.down = spconv.SparseConv3d(8, 16, 3, stride=2, padding=1, bias=False, indice_key='d1')
        self.up = spconv.SparseInverseConv3d(16, 8, 3, bias=False, indice_key='d1')
        self.keyless = spconv.SubMConv3d(8, 4, 3, padding=1, bias=False)

    def forward(self, x):
        return self.keyless(self.up(self.down(self.subm(x)))).features


def test_sparse_convs_are_counted_from_the_rulebook_as_spconv_runs_them(slim_kit):
    from fsdlite.utils.compat import import_spconv
    spconv = import_spconv()
    torch.manual_seed(0)
    net = slim_kit.Wrap(SparseNet(spconv)).eval()
    x = _sparse_input(spconv)
    total, by_op, _ = count_macs(net, dict(inputs=x))
    # the same forward with the hooks off: spconv's own gather-GEMM-scatter matmuls, counted one by one
    counter = MacCounter()
    with torch.no_grad(), counter:
        net(x)
    assert counter.macs['aten::mm'] == total == by_op['spconv (rulebook)'] > 0
    # and the rulebook of the submanifold layer: every voxel at the centre offset, mirrored offsets
    pairs = []
    hook = net.body.subm.register_forward_hook(lambda m, a, o: pairs.append(sparse_conv_pairs(m, a, o)))
    with torch.no_grad():
        net(x)
    hook.remove()
    assert pairs[0][13] == x.features.shape[0] and pairs[0] == pairs[0][::-1]


def test_kernel_point_conv_counts_valid_neighbour_pairs(slim_kit):
    from fsdlite.models.kpconv.kpconv_layer import KPConv

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = KPConv(3, 6, kernel_size=5, radius=0.5)

        def forward(self, x):
            pts, nbrs, feats = x
            return self.conv(pts, pts, nbrs, feats)

    pts = torch.rand(10, 3)
    nbrs = torch.tensor([[0, 1, 10]] * 10)           # two valid neighbours, one shadow slot per query
    total, by_op, _ = count_macs(slim_kit.Wrap(Body()), dict(inputs=(pts, nbrs, torch.randn(10, 3))))
    assert by_op['fsdlite::kpconv'] == 10 * 2 * 3 * 5 + 10 * 5 * 3 * 6   # 'sum' aggregation over 5 kernel points
    assert total == by_op['fsdlite::kpconv']


def test_fsdlite_sparse_convs_count_what_spconv_runs(slim_kit):
    """The conv layers the configs build, run on fsdlite's kernels (the default on the CPU) or on spconv's, count
    the multiply-accumulates spconv's own layers count for the same rulebooks."""
    from fsdlite.models.layers.sparse_conv import RulebookSparseConv3d
    from fsdlite.models.layers.sparse_tensor import SparseTensor
    from fsdlite.utils.compat import import_spconv
    spconv = import_spconv()
    theirs = SparseNet(spconv)
    x = _sparse_input(spconv)
    want, _, _ = count_macs(slim_kit.Wrap(theirs), dict(inputs=x))

    class Ours(nn.Module):
        def __init__(self, backend):
            super().__init__()
            self.backend = backend
            self.convs = nn.ModuleList(RulebookSparseConv3d.from_spconv(m) for m in
                                       (theirs.subm, theirs.down, theirs.up, theirs.keyless))

        def forward(self, x):
            t = SparseTensor(x.features, x.indices, x.spatial_shape, x.batch_size, backend=self.backend)
            for conv in self.convs:
                t = conv(t)
            return t.features

    for backend in ('fsdlite', 'spconv'):
        total, by_op, uncounted = count_macs(slim_kit.Wrap(Ours(backend)), dict(inputs=x))
        assert total == want and set(uncounted) <= {'fsdlite::rulebook_subm_pairs', 'fsdlite::rulebook_conv_pairs'}
        assert by_op['fsdlite::sparse_conv' if backend == 'fsdlite' else 'aten::mm'] == want
