"""fsdlite.utils.constants.const: torch.tensor on every call off CUDA, made once per (values, dtype, device) on
CUDA (a CUDA graph capture copies nothing from the host)."""
import pytest
import torch

from fsdlite.utils.constants import const


def test_off_cuda_every_call_makes_a_new_tensor():
    a, b = const([1.0, 2.0], torch.float64), const([1.0, 2.0], torch.float64)
    assert torch.equal(a, torch.tensor([1.0, 2.0], dtype=torch.float64)) and a.data_ptr() != b.data_ptr()
    assert const([1, 2]).dtype == torch.int64 and const([1.0, 2]).dtype == torch.float32


def test_tensors_are_refused():
    with pytest.raises(TypeError, match='Python scalars'):
        const([torch.tensor(1.0)], device='cuda')


@pytest.mark.cuda
def test_on_cuda_the_same_values_give_the_same_tensor(gpu):
    if gpu.type != 'cuda':
        pytest.skip('the cache is for CUDA devices')
    a, b = const([0.5, 1.5], torch.float32, gpu), const([0.5, 1.5], torch.float32, gpu)
    assert a.data_ptr() == b.data_ptr() and a.device.type == 'cuda'
    assert const([1, 1], device=gpu).dtype == torch.int64 and const([1.0, 1.0], device=gpu).dtype == torch.float32
    assert const([True], device=gpu).dtype == torch.bool  # 1, 1.0 and True are different keys
