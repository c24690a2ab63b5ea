"""rulebook_pairs (neighbour map -> offset-grouped pair list): equality with the pure-torch reference on random
and real rulebooks, properties (every real pair once, one offset per tile, truncation counted), invalid inputs,
opcheck, CUDA vs CPU."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.ops import RulebookPairs, rulebook_conv, rulebook_inverse, rulebook_pairs, rulebook_subm
from fsdlite.ops.rulebook.reference import rulebook_pairs_reference


def random_map(vout, vin, kv, fill, seed):
    g = torch.Generator().manual_seed(seed)
    nbr = torch.randint(0, max(vin, 1), (vout, kv), generator=g)
    return torch.where(torch.rand(vout, kv, generator=g) < fill, nbr, torch.full_like(nbr, vin))


def assert_equal(res, ref):
    assert isinstance(res, RulebookPairs)
    for name, got, want in zip(RulebookPairs._fields, res, ref):
        assert got.dtype == torch.int64 and torch.equal(got, want), name


@settings(max_examples=40, deadline=None)
@given(vout=st.integers(0, 300), vin=st.integers(0, 300), kv=st.sampled_from([1, 8, 27, 125]),
       fill=st.floats(0.0, 1.0), tile=st.sampled_from([1, 4, 128]), tiles=st.integers(0, 60),
       seed=st.integers(0, 2 ** 16))
def test_matches_reference_and_properties(vout, vin, kv, fill, tile, tiles, seed):
    nbr = random_map(vout, vin, kv, fill, seed)
    res = rulebook_pairs(nbr, vin, tiles * tile, tile)
    assert_equal(res, rulebook_pairs_reference(nbr, vin, tiles * tile, tile))
    ins, outs, offs = res.pairs
    real = ins < vin
    assert torch.equal(real, outs < vout) and int(real.sum()) == int(res.num_placed)
    assert int(res.num_pairs) == int((nbr < vin).sum()) >= int(res.num_placed)
    if tiles:
        assert (offs.view(tiles, tile) == offs.view(tiles, tile)[:, :1]).all()  # one kernel offset per tile
    assert torch.equal(nbr[outs[real], offs[real]], ins[real])  # every listed pair is a pair of the map
    listed = set(zip((outs[real] * kv + offs[real]).tolist()))
    assert len(listed) == int(real.sum())  # ... and none twice


def test_real_rulebooks_round_trip():
    """Pairs of submanifold, strided and inverse maps of a real voxel set rebuild the maps exactly."""
    g = torch.Generator().manual_seed(0)
    coors = torch.nonzero(torch.rand(2, 9, 12, 10, generator=g) < 0.2)
    n, grid = coors.shape[0], (9, 12, 10)
    subm = rulebook_subm(coors, n, grid)
    conv = rulebook_conv(coors, n, grid, 3, 2, 1, max_out=n)
    inverse = rulebook_inverse(conv.nbr, n)
    for nbr, num_in in ((subm, n), (conv.nbr, n), (inverse, n)):
        res = rulebook_pairs(nbr, num_in, 128 * 40, 128)
        assert int(res.num_placed) == int(res.num_pairs) == int((nbr < num_in).sum())
        ins, outs, offs = res.pairs
        real = ins < num_in
        rebuilt = torch.full_like(nbr, num_in)
        rebuilt[outs[real], offs[real]] = ins[real]
        assert torch.equal(rebuilt, nbr)


def test_truncation_drops_the_highest_offsets():
    nbr = torch.tensor([[0, 1, 2], [1, 3, 3], [2, 0, 1]])  # offsets 0, 1, 2 hold 3, 2, 2 pairs; dump 3
    res = rulebook_pairs(nbr, 3, 8, 4)  # offset 0 -> tile 0, offset 1 -> tile 1, offset 2 does not fit
    assert res.pairs.tolist() == [[0, 1, 2, 3, 1, 0, 3, 3], [0, 1, 2, 3, 0, 2, 3, 3], [0, 0, 0, 0, 1, 1, 1, 1]]
    assert (int(res.num_pairs), int(res.num_placed)) == (7, 5)


@pytest.mark.parametrize('call, error, match', [
    (lambda: rulebook_pairs(torch.zeros(3, 2), 4, 8, 4), TypeError, 'nbr must have one of the dtypes'),
    (lambda: rulebook_pairs(torch.zeros(3, dtype=torch.long), 4, 8, 4), ValueError, 'nbr must be 2-D'),
    # index values: checked once, by the C++ op
    (lambda: rulebook_pairs(torch.tensor([[5]]), 4, 8, 4), RuntimeError,
     r'nbr \(input rows; num_in is the dump\) contains 5, expected values in \[0, 5\)'),
    (lambda: rulebook_pairs(torch.tensor([[-1]]), 4, 8, 4), RuntimeError,
     r'nbr \(input rows; num_in is the dump\) contains -1, expected values in \[0, 5\)'),
    (lambda: rulebook_pairs(torch.zeros(3, 2, dtype=torch.long), 4, 7, 4), ValueError,
     r'capacity must be a multiple of tile \(4\), got 7'),
    (lambda: rulebook_pairs(torch.zeros(3, 2, dtype=torch.long), 4, 8, 0), ValueError, 'tile must be > 0, got 0'),
    (lambda: rulebook_pairs(torch.zeros(3, 2, dtype=torch.long), -1, 8, 4), ValueError, 'num_in must be >= 0'),
    (lambda: rulebook_pairs(torch.zeros(3, 0, dtype=torch.long), 4, 8, 4), ValueError, '1 to 4096 kernel offsets'),
])
def test_invalid_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_cpp_checks_guard_direct_calls():
    op = torch.ops.fsdlite.rulebook_pairs
    with pytest.raises(RuntimeError, match=r'nbr \(input rows; num_in is the dump\) contains 7, expected values in'):
        op(torch.tensor([[7]]), 4, 8, 4)
    with pytest.raises(RuntimeError, match='capacity must be a multiple of tile'):
        op(torch.tensor([[1]]), 4, 6, 4)
    with pytest.raises(RuntimeError, match='tile must lie in'):
        op(torch.tensor([[1]]), 4, 8, 0)


def test_opcheck():
    nbr = random_map(50, 40, 27, 0.2, seed=1)
    torch.library.opcheck(torch.ops.fsdlite.rulebook_pairs.default, (nbr, 40, 1024, 32))


@pytest.mark.cuda
def test_cuda_matches_cpu():
    for vout, vin, kv, fill, tiles, tile, seed in [(3000, 2000, 27, 0.15, 40, 128, 0), (500, 400, 27, 0.6, 30, 8, 1),
                                                   (0, 10, 27, 0.5, 4, 4, 2), (700, 600, 1, 1.0, 200, 4, 3)]:
        nbr = random_map(vout, vin, kv, fill, seed)
        cpu = rulebook_pairs(nbr, vin, tiles * tile, tile)
        gpu = rulebook_pairs(nbr.cuda(), vin, tiles * tile, tile)
        for a, b in zip(gpu, cpu):
            assert torch.equal(a.cpu(), b)
    args = (random_map(50, 40, 27, 0.2, 4).cuda(), 40, 256, 32)
    torch.library.opcheck(torch.ops.fsdlite.rulebook_pairs.default, args)
