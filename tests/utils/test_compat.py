"""Tests of fsdlite.utils.compat: mmengine checkpoints on torch >= 2.6, the spconv CPU shims, the ONNX export rules."""
import itertools
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fsdlite.utils import compat


# ---------------------------------------------------------------------------------- mmengine
def test_checkpoint_with_message_hub_objects_loads(tmp_path):
    """Resume checkpoints hold mmengine objects that torch's weights_only loader refuses."""
    import fsdlite.registry  # noqa: F401  (applies the checkpoint fix)
    from mmengine.logging.history_buffer import HistoryBuffer
    from mmengine.runner.checkpoint import CheckpointLoader, save_checkpoint

    buffer = HistoryBuffer()
    buffer.update(1.5)
    state = {'state_dict': {'w': torch.arange(4.0)}, 'message_hub': {'loss': buffer},
             'meta': {'iter': 7, 'dtype': np.dtype('float64')}}
    path = tmp_path / 'iter_7.pth'
    save_checkpoint(state, str(path))
    loaded = CheckpointLoader.load_checkpoint(str(path), map_location='cpu')
    assert loaded['meta']['iter'] == 7
    assert torch.equal(loaded['state_dict']['w'], torch.arange(4.0))
    assert loaded['message_hub']['loss'].current() == 1.5


def test_corrupt_checkpoint_names_the_file(tmp_path):
    import fsdlite.registry  # noqa: F401
    from mmengine.runner.checkpoint import CheckpointLoader

    path = tmp_path / 'broken.pth'
    path.write_bytes(b'not a checkpoint at all')
    with pytest.raises(compat.CheckpointLoadError, match='broken.pth'):
        CheckpointLoader.load_checkpoint(str(path), map_location='cpu')
    with pytest.raises(FileNotFoundError, match='missing.pth'):
        CheckpointLoader.load_checkpoint(str(tmp_path / 'missing.pth'), map_location='cpu')


def test_patches_are_idempotent():
    compat.apply_all()
    assert compat.patch_spconv() is False
    assert compat.patch_mmengine_checkpoint_loading() is False


# ---------------------------------------------------------------------------------- spconv
@pytest.fixture(scope='module')
def spconv():
    return compat.import_spconv()


def _random_sparse_input(generator, batch, shape, density, channels):
    occupied = torch.rand((batch, *shape), generator=generator) < density
    # torch.nonzero returns column-major indices (kept by .int()): the guard must make them contiguous
    coords = occupied.nonzero().int()  # (V, 4) [b, z, y, x]
    feats = torch.randn(len(coords), channels, generator=generator, dtype=torch.float64)
    return coords, feats


def _dense_input(coords, feats, batch, shape):
    dense = feats.new_zeros(batch, feats.shape[1], *shape)
    b, z, y, x = coords.long().unbind(1)
    dense[b, :, z, y, x] = feats
    return dense


def _dense_weight(conv):
    # spconv weight (out, kz, ky, kx, in) -> F.conv3d weight (out, in, kz, ky, kx)
    return conv.weight.permute(0, 4, 1, 2, 3)


def _gather_at(dense, coords):
    b, z, y, x = coords.long().unbind(1)
    return dense[b, :, z, y, x]


def test_default_algorithm_is_native_on_cpu(spconv):
    from spconv.core import ConvAlgo
    assert spconv.SubMConv3d(2, 2, 3).algo == ConvAlgo.Native
    assert spconv.SparseConv3d(2, 2, 3, stride=2).algo == ConvAlgo.Native


def test_guard_makes_column_major_indices_contiguous(spconv):
    coords = (torch.rand(1, 4, 4, 4) < 0.5).nonzero().int()
    assert not coords.is_contiguous()
    x = spconv.SparseConvTensor(torch.randn(len(coords), 2), coords, [4, 4, 4], 1)
    fixed = compat._make_contiguous(x)
    assert fixed.indices.is_contiguous() and fixed.indices.dtype == torch.int32
    assert torch.equal(fixed.indices, coords)


def test_backward_runs_on_cpu(spconv):
    """Without the stream shim, spconv's CPU backward asks for a CUDA stream and fails."""
    g = torch.Generator().manual_seed(0)
    coords, feats = _random_sparse_input(g, 1, (6, 6, 6), 0.3, 3)
    feats = feats.float().requires_grad_()
    conv = spconv.SubMConv3d(3, 4, 3, bias=False)
    out = conv(spconv.SparseConvTensor(feats, coords, [6, 6, 6], 1))
    out.features.square().sum().backward()
    assert feats.grad is not None and conv.weight.grad is not None
    assert torch.isfinite(feats.grad).all()


@pytest.mark.slow
def test_random_convs_match_dense_conv3d_with_two_threads(spconv):
    """>= 50 random strided and submanifold convs, 2 threads, forward and backward vs F.conv3d."""
    g = torch.Generator().manual_seed(1234)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    checked = {'strided': 0, 'subm': 0}
    try:
        for trial, kind in zip(range(60), itertools.cycle(['strided', 'subm'])):
            batch = 1 + trial % 2
            shape = [int(s) for s in torch.randint(5, 14, (3,), generator=g)]
            cin, cout = [int(c) for c in torch.randint(1, 9, (2,), generator=g)]
            coords, feats = _random_sparse_input(g, batch, shape, 0.25, cin)
            feats.requires_grad_()
            if kind == 'strided':
                stride, padding, kernel = 2, int(torch.randint(0, 2, (1,), generator=g)), 3
                conv = spconv.SparseConv3d(cin, cout, kernel, stride=stride, padding=padding, bias=False)
            else:
                stride, padding, kernel = 1, 1, 3
                conv = spconv.SubMConv3d(cin, cout, kernel, bias=False)
            conv = conv.double()
            x = spconv.SparseConvTensor(feats, coords, shape, batch)
            y = conv(x)
            dense_in = _dense_input(coords, feats, batch, shape)
            expected = F.conv3d(dense_in, _dense_weight(conv), stride=stride, padding=padding)
            if kind == 'subm':
                expected_feats = _gather_at(expected, coords)
            else:
                expected_feats = _gather_at(expected, y.indices)
                # every non-zero dense output must be an output site of the sparse conv
                mask = torch.zeros(expected.shape[0], *expected.shape[2:], dtype=torch.bool)
                b, z, yy, xx = y.indices.long().unbind(1)
                mask[b, z, yy, xx] = True
                leftover = expected.abs().sum(1)[~mask]
                assert leftover.numel() == 0 or leftover.max().item() < 1e-12
            torch.testing.assert_close(y.features, expected_feats, atol=1e-5, rtol=0)
            upstream = torch.randn(y.features.shape, generator=g, dtype=torch.float64)
            grad_feats, grad_w = torch.autograd.grad(y.features, (feats, conv.weight), upstream)
            dense_w = _dense_weight(conv).detach().requires_grad_()
            dense_in_leaf = dense_in.detach().requires_grad_()
            out = F.conv3d(dense_in_leaf, dense_w, stride=stride, padding=padding)
            sites = coords if kind == 'subm' else y.indices
            ref_grad_in, ref_grad_w = torch.autograd.grad(_gather_at(out, sites), (dense_in_leaf, dense_w), upstream)
            torch.testing.assert_close(grad_feats, _gather_at(ref_grad_in, coords), atol=1e-5, rtol=0)
            torch.testing.assert_close(grad_w.permute(0, 4, 1, 2, 3), ref_grad_w, atol=1e-5, rtol=0)
            checked[kind] += 1
    finally:
        torch.set_num_threads(previous)
    assert checked['strided'] >= 25 and checked['subm'] >= 25


# ------------------------------------------------------------------------------- spconv runs where it imports
def test_spconv_runs_on_the_cpu_here():
    assert compat.spconv_runs_on('cpu') is compat.spconv_available()


def test_a_failed_spconv_probe_warns_once_and_says_no(monkeypatch):
    """An spconv wheel built for another CUDA imports and fails at its first kernel: 'auto' must then not pick it."""
    monkeypatch.setattr(compat, '_SPCONV_RUNS', {})
    monkeypatch.setattr(compat, '_probe_spconv', lambda device: (False, 'RuntimeError: no kernel image for sm_90'))
    monkeypatch.setattr(compat, 'spconv_available', lambda: True)
    with pytest.warns(RuntimeWarning, match="does not run on cuda: RuntimeError: no kernel image.*fsdlite's own"):
        assert compat.spconv_runs_on('cuda') is False
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert compat.spconv_runs_on(torch.device('cuda', 0)) is False  # probed once per device type


@pytest.mark.cuda
def test_auto_backend_on_cuda_skips_an_spconv_that_does_not_run(monkeypatch):
    if not compat.spconv_available():
        pytest.skip(f'needs spconv: {compat.spconv_unavailable_reason()}')
    from fsdlite.models.lidar import SparseUNet
    monkeypatch.setattr(compat, '_SPCONV_RUNS', {'cuda': (False, 'broken')})
    net = SparseUNet(4, (1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 8.0, 8.0, 8.0), base_channels=4,
                     encoder_channels=((4,), (4,)), decoder_channels=((4, 4, 4), (4, 4, 4))).cuda()
    assert net.resolved_conv_backend(torch.zeros(1, 4, device='cuda')) == 'fsdlite'


def test_onnx_export_rules_leave_out_the_quadratic_rule_and_restore_the_defaults():
    rewriter = pytest.importorskip('onnxscript.rewriter')
    defaults = rewriter._DEFAULT_REWRITE_RULES
    names = [getattr(rule, 'name', None) for rule in defaults]
    assert set(compat.QUADRATIC_ONNX_RULES) <= set(names), 'onnxscript renamed the rule the shim leaves out'
    with compat.onnx_export_rules():
        inside = [getattr(rule, 'name', None) for rule in rewriter._DEFAULT_REWRITE_RULES]
        assert not set(inside) & set(compat.QUADRATIC_ONNX_RULES)
        assert len(inside) == len(names) - len(compat.QUADRATIC_ONNX_RULES)
    assert rewriter._DEFAULT_REWRITE_RULES is defaults
    with pytest.raises(RuntimeError), compat.onnx_export_rules():
        raise RuntimeError('an export that fails')
    assert rewriter._DEFAULT_REWRITE_RULES is defaults
