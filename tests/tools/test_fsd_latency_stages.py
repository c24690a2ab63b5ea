"""benchmarks/_stages.py: the FSD latency benchmark times a detector's stages from outside the model."""
import pytest
import torch

from fsdlite.deploy import fixed_shape


@pytest.fixture
def fsd_latency(load_benchmark):
    """benchmarks/fsd_latency.py loaded from its file."""
    return load_benchmark('fsd_latency')


@pytest.mark.parametrize('detector, static, expected', [
    ('fsd', False, {'vfe', 'backbone', 'neck_head', 'fg_sampling', 'instances', 'sir', 'box_head', 'nms'}),
    ('fsdv2', True, {'pre_ops', 'vfe', 'backbone', 'neck_head', 'fg_sampling', 'instances', 'virtual_voxels',
                     'mixer_rulebooks', 'mixer', 'box_head', 'nms'}),
])
def test_stages_are_timed_from_outside_and_restored(fsd_latency, shared_data, detector, static, expected):
    torch.manual_seed(0)
    model = fsd_latency.build('kitti', detector, static)
    points = fsd_latency.load_frame('kitti', shared_data)
    times, pred = fsd_latency.timed_runs(model, points, repeat=1)
    assert expected <= set(times), f'stages timed: {sorted(times)}'
    assert set(times) <= set(fsd_latency.STAGES) | {'total'}
    assert all(t >= 0 for t in times.values())
    # each call is billed once (nested timed calls are subtracted), so the stages fit in the total
    assert sum(t for k, t in times.items() if k != 'total') <= times['total'] * 1.01
    assert pred.bboxes_3d.shape[1] == 7
    # the model is left as it was: no timing wrapper stays on an instance
    wrapped = [f'{name}.{attr}' for name, module in model.named_modules()
               for attr in ('forward', 'predict', 'nms', 'instances', 'conv_plan')
               if attr in vars(module)]
    assert not wrapped
    detector = getattr(model, 'detector', model)  # the fixed-shape run wraps the detector (FixedShapeDetector)
    assert type(detector.fg_sampler).__name__ == 'ForegroundSampler' and '__call__' not in vars(detector.fg_sampler)
    assert fixed_shape.fixed_inputs.__name__ == 'fixed_inputs'  # the pre-ops function is restored too
