"""Bounds (named size bounds, overflow rule) and padded-tensor helpers."""
import pytest
import torch

from fsdlite.structures.bounds import BoundExceededError, Bounds, check_bound, is_exporting
from fsdlite.structures.padded import Padded, dump_index, pad_to_bound, valid_mask, with_dump_row

CFG = dict(max_points=1000, max_voxels=[800, 400, 200], max_fg_points=[64, 32], max_clusters=50, max_boxes=20)


# --------------------------------------------------------------------------------------------- Bounds
def test_bounds_from_config():
    b = Bounds.from_cfg(CFG)
    assert Bounds.from_cfg(b) is b and len(Bounds.from_cfg(None)) == 0
    assert b['max_voxels'] == (800, 400, 200) and b['max_points'] == 1000
    assert b.get('max_voxels', 2) == 200 and b.get('max_fg_points', 1) == 32
    assert b.get('max_boxes') == 20 and b.get('max_boxes', 5) == 20  # a scalar bound is shared by every index
    assert b.label('max_voxels', 1) == 'max_voxels[1]' and b.label('max_clusters', 1) == 'max_clusters'
    assert b.to_dict() == CFG and set(b) == set(CFG)
    assert repr(b).startswith('Bounds(max_points=1000, max_voxels=[800, 400, 200]')
    assert Bounds(**b.to_dict()).to_dict() == CFG
    cfg = dict(CFG)
    Bounds.from_cfg(cfg)
    assert cfg == CFG  # the config is not mutated


@pytest.mark.parametrize('value', [0, -3, 1.5, True, [], [4, 0], 'big', None])
def test_invalid_bound_values(value):
    with pytest.raises(ValueError, match=r'bounds.max_voxels must'):
        Bounds(max_voxels=value)


def test_bound_lookup_errors():
    b = Bounds.from_cfg(CFG)
    with pytest.raises(KeyError, match=r"bounds has no 'max_pillars'; the config defines \['max_boxes'"):
        b.get('max_pillars')
    with pytest.raises(ValueError, match=r'bounds.max_voxels is a list \[800, 400, 200\]; pass the index'):
        b.get('max_voxels')
    with pytest.raises(IndexError, match=r'bounds.max_voxels has 3 entries \[800, 400, 200\], got index 3'):
        b.get('max_voxels', 3)
    with pytest.raises(TypeError, match='bounds must be a dict'):
        Bounds.from_cfg([('max_points', 3)])


def test_check_raises_in_eager_mode_with_name_needed_allowed():
    b = Bounds.from_cfg(CFG)
    assert int(b.check('max_voxels', 400, 1)) == 0
    assert int(b.check('max_voxels', torch.tensor(400), 1)) == 0
    with pytest.raises(BoundExceededError, match=r'bound max_voxels\[1\] exceeded: needed 401, allowed 400') as info:
        b.check('max_voxels', torch.tensor(401), 1)
    assert (info.value.name, info.value.needed, info.value.allowed) == ('max_voxels[1]', 401, 400)
    with pytest.raises(BoundExceededError, match='bound max_boxes exceeded: needed 21, allowed 20'):
        b.check('max_boxes', 21)
    assert isinstance(info.value, RuntimeError)


def test_non_strict_check_reports_the_dropped_count():
    assert int(check_bound(torch.tensor(13), 10, 'x', strict=False)) == 3
    assert int(check_bound(torch.tensor(7), 10, 'x', strict=False)) == 0
    assert int(check_bound(25, 10, 'x', strict=False)) == 15
    assert check_bound(torch.tensor([5]), 10, 'x', strict=False).shape == ()


class _Overflow(torch.nn.Module):
    def forward(self, scores):
        needed = (scores > 0).sum()
        return check_bound(needed, 3, 'max_positive'), torch.tensor(is_exporting())


def test_export_mode_truncates_and_reports_instead_of_raising():
    module = _Overflow()
    scores = torch.tensor([1.0, 2.0, -1.0, 3.0, 4.0, 5.0])
    assert not is_exporting()
    with pytest.raises(BoundExceededError, match='needed 5, allowed 3'):
        module(scores)
    exported = torch.export.export(module, (torch.zeros(6),)).module()
    dropped, flag = exported(scores)
    assert int(dropped) == 2 and bool(flag)
    assert int(exported(torch.tensor([1.0, -1, -1, -1, -1, -1]))[0]) == 0


# --------------------------------------------------------------------------------------------- padded
def test_valid_mask_and_dump_index():
    assert valid_mask(2, 4).tolist() == [True, True, False, False]
    assert valid_mask(torch.tensor(3), 4).tolist() == [True, True, True, False]
    assert valid_mask(torch.tensor([0]), 2).tolist() == [False, False]
    index = torch.tensor([3, 1, 0, 2])
    assert dump_index(index, valid_mask(2, 4), 7).tolist() == [3, 1, 7, 7]
    assert with_dump_row(torch.ones(2, 3)).tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 0]]
    assert with_dump_row(torch.ones(2), fill=-1.0).tolist() == [1, 1, -1]


def test_padded_tensor():
    p = Padded(torch.arange(12.0).view(4, 3), torch.tensor(2))
    assert p.bound == 4 and p.mask().tolist() == [True, True, False, False]
    assert p.masked(-1)[2:].eq(-1).all() and torch.equal(p.masked()[:2], p.data[:2])
    assert torch.equal(p.unpad(), p.data[:2])


def test_pad_to_bound():
    x = torch.arange(6).view(3, 2)
    padded, dropped = pad_to_bound(x, 5, 'max_points', fill=-1)
    assert padded.data.tolist() == [[0, 1], [2, 3], [4, 5], [-1, -1], [-1, -1]]
    assert int(padded.num_valid) == 3 and int(dropped) == 0
    exact, _ = pad_to_bound(x, 3, 'max_points')
    assert torch.equal(exact.data, x)
    with pytest.raises(BoundExceededError, match='bound max_points exceeded: needed 3, allowed 2'):
        pad_to_bound(x, 2, 'max_points')
    cut, dropped = pad_to_bound(x, 2, 'max_points', strict=False)
    assert cut.data.tolist() == [[0, 1], [2, 3]] and int(cut.num_valid) == 2 and int(dropped) == 1
    empty, _ = pad_to_bound(torch.zeros(0, 2), 2, 'max_points')
    assert empty.data.shape == (2, 2) and int(empty.num_valid) == 0
