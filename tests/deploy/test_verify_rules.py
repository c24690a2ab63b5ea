"""deploy verification verdicts: ONNX Runtime equal to the float64 graph passes even where PyTorch float32 took
another branch of a near-tie; otherwise the float64 rule of FrameCheck.output_ok holds."""
from fsdlite.deploy.compare import OutputDiff
from fsdlite.deploy.verify import FrameCheck, format_checks


def test_ort_equal_to_float64_passes_when_pytorch_float32_flipped_a_tie():
    diff = OutputDiff('num_instances', 1, 1.0, 2e-3, 0)
    check = FrameCheck('f', 's', [diff], None, {}, {}, fp64={'num_instances': (0.0, 1.0)})
    assert check.output_ok(diff)
    # ORT away from float64 as well: float64 took a third branch, nothing can be judged
    assert not check._replace(fp64={'num_instances': (1.0, 1.0)}).output_ok(diff)
    logits = OutputDiff('cls_logits', 10, 0.9, 0.2, 1e-4)
    assert FrameCheck('f', 's', [logits], None, {}, {}, fp64={'cls_logits': (2e-5, 0.98)}).output_ok(logits)
    assert not FrameCheck('f', 's', [logits], None, {}, {}, fp64={'cls_logits': (3e-4, 0.98)}).output_ok(logits)


def test_the_verdict_names_the_near_tie():
    class Match:
        same, detail = True, '1/1 equal'

    diff = OutputDiff('num_instances', 1, 1.0, 2e-3, 0)
    text = format_checks([FrameCheck('kitti', 'frame', [diff], Match(), {}, {'graph': 0.1},
                                     fp64={'num_instances': (0.0, 1.0)})])
    assert 'yes (PyTorch float32 flipped a near-tie; ONNX Runtime = float64)' in text
    assert text.endswith('1 inputs: 1 verified, 0 exceeded a bound (reported), 0 failed')
