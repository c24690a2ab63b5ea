"""Incompatible slimming requests fail with a clear error naming the value and what was expected."""
import math

import pytest
import torch

from fsdlite.slim.api import prepare, write_slim
from fsdlite.slim.errors import SlimError


@pytest.mark.parametrize('width', [0, -0.5, 1.5, math.nan, True])
def test_width_outside_zero_one(width, slim_kit):
    with pytest.raises(SlimError, match=r'--width=.*expected a ratio of kept channels in \(0, 1\]'):
        slim_kit.Request(width=width).validate()


def test_bad_divisor_and_ratio(slim_kit):
    with pytest.raises(SlimError, match='--divisor=0: expected a positive integer'):
        slim_kit.Request(divisor=0).validate()
    with pytest.raises(SlimError, match=r'--keep-ratio-per-stage backbone=2.*\(0, 1\]'):
        slim_kit.Request(ratios={'backbone': 2}).validate()


def test_unknown_stage_lists_the_stages(prepared, slim_kit, tmp_path):
    with pytest.raises(SlimError, match=r"unknown stage 'backbone.stages.9'; stages of this config: .*backbone.blocks"):
        write_slim(prepared('kpcnn'), slim_kit.Request(depth={'backbone.stages.9': 1}), tmp_path)


@pytest.mark.parametrize('depth, message', [({'backbone.blocks.3': 2}, 'the stage has 2 blocks, keep fewer'),
                                            ({'backbone.blocks.3': 0}, 'expected a positive number of blocks'),
                                            ({'backbone.in_channels': 1}, 'has 1 blocks'),
                                            ({'num_classes': 2}, 'does not build|does not drop whole blocks')])
def test_bad_depth_values(depth, message, prepared, slim_kit, tmp_path):
    with pytest.raises(SlimError, match=message):
        write_slim(prepared('kpcnn'), slim_kit.Request(depth=depth), tmp_path)


def test_ratio_for_a_path_without_width_entries(prepared, slim_kit, tmp_path):
    with pytest.raises(SlimError, match=r"'data_preprocessor' matches no width entry.*backbone.channels.0"):
        write_slim(prepared('kpcnn'), slim_kit.Request(ratios={'data_preprocessor': 0.5}), tmp_path)


def test_uneven_ratios_on_coupled_stages(prepared, slim_kit, tmp_path):
    out = write_slim(prepared('kpcnn'), slim_kit.Request(ratios={'head_channels': 0.5}), tmp_path)
    assert out.result.changes == [('head_channels.0', 16, 8, 'width')]
    # SIR blocks 0 and 1 are tied by a residual sum: their widths must shrink together
    with pytest.raises(SlimError, match='coupled layers must keep matching channels.*sir.blocks'):
        write_slim(prepared('fsd'), slim_kit.Request(ratios={'sir.block_channels.0': 0.5}), tmp_path)
    # KPConvX generates one weight per 8 channels: 30 % of 64 is not a whole number of groups
    with pytest.raises(SlimError, match='coupled sets of 8.*--divisor'):
        write_slim(prepared('kpcnn_x'), slim_kit.Request(width=0.3), tmp_path)


def test_widths_that_change_the_structure(prepared, slim_kit, tmp_path):
    # stage 3 (16 -> 32 channels) has a projection shortcut; at 16 -> 16 the block would use an identity
    with pytest.raises(SlimError, match='different set of layers.*backbone.stages.3.0.shortcut'):
        write_slim(prepared('kpcnn'), slim_kit.Request(ratios={'backbone.channels.3': 0.5}), tmp_path)


def test_checkpoint_of_another_config(prepared, families, tmp_path):
    ckpt = tmp_path / 'kpcnn_x.pth'
    torch.save({'state_dict': prepared('kpcnn_x').model.state_dict()}, ckpt)
    path, opts = families['kpcnn']
    with pytest.raises(SlimError, match=r"does not belong to config .*kpcnn_kpconv_shapes.py.*(missing|shapes)"):
        prepare(path, str(ckpt), opts)


def test_missing_checkpoint(families):
    path, opts = families['kpcnn']
    with pytest.raises(FileNotFoundError, match="checkpoint '/nonexistent.pth' does not exist"):
        prepare(path, '/nonexistent.pth', opts)


@pytest.mark.parametrize('iters, lr, message', [
    (0, None, '--finetune expects a positive number of iterations, got 0'),
    (True, None, '--finetune expects a positive number of iterations, got True'),
    (2, 0.0, '--finetune-lr expects a finite learning rate > 0, got 0.0'),
    (2, math.inf, '--finetune-lr expects a finite learning rate > 0, got inf'),
    (2, '1e-3', "--finetune-lr expects a finite learning rate > 0, got '1e-3'"),
])
def test_finetune_rejects_bad_iterations_and_learning_rates(iters, lr, message, tmp_path):
    from fsdlite.slim.finetune import finetune
    with pytest.raises(ValueError, match=message):
        finetune('configs/kpconv/kpcnn_kpconv_shapes.py', None, iters, str(tmp_path), lr=lr)
