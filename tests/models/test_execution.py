"""The execution mode: 'dynamic' by default, 'fixed' inside fixed_shapes() (restored after errors); the shared row
operations run the fused op / index_select in the dynamic mode and the dump-slot forms in the fixed mode, equal on
the valid rows."""
import pytest
import torch

from fsdlite.models.layers.execution import execution_mode, fixed_shapes, gather, segment_reduce
from fsdlite.ops import segment_reduce as fused_segment_reduce


def test_mode_is_dynamic_by_default_and_restored_after_an_error():
    assert execution_mode() == 'dynamic'
    with pytest.raises(RuntimeError, match='stop'):
        with fixed_shapes():
            assert execution_mode() == 'fixed'
            with fixed_shapes():
                assert execution_mode() == 'fixed'
            raise RuntimeError('stop')
    assert execution_mode() == 'dynamic'


@pytest.mark.parametrize('reduce', ['sum', 'mean', 'max', 'min'])
def test_fixed_mode_discards_the_dump_slot_and_matches_the_dynamic_mode(reduce):
    g = torch.Generator().manual_seed(0)
    src = torch.randn(40, 3, generator=g, dtype=torch.float64)
    index = torch.randint(0, 6, (40,), generator=g)
    index[index == 2] = 3  # an empty segment: 0 in both modes
    dynamic = segment_reduce(src, index, 6, reduce)
    torch.testing.assert_close(dynamic, fused_segment_reduce(src, index, 6, reduce))
    padded_src = torch.cat([src, torch.full((5, 3), 1e6, dtype=torch.float64)])  # padding rows: must not count
    padded_index = torch.cat([index, torch.full((5,), 6)])  # index 6 = num_segments: the dump slot
    with fixed_shapes():
        fixed = segment_reduce(padded_src, padded_index, 6, reduce)
    torch.testing.assert_close(fixed, dynamic)
    assert bool((fixed[2] == 0).all())


def test_gather_reads_zeros_at_the_dump_index_only_in_the_fixed_mode():
    src = torch.arange(12.0).view(4, 3)
    index = torch.tensor([3, 0, 4])
    with pytest.raises(IndexError):
        gather(src, index)  # dynamic: index_select, 4 is out of range
    with fixed_shapes():
        out = gather(src, index)
    assert torch.equal(out, torch.cat([src[[3, 0]], torch.zeros(1, 3)]))
    assert torch.equal(gather(src, index[:2]), src[[3, 0]])
