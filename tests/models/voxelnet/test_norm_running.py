"""FeatureStandardizer(train_stats='running'): the per-volume level survives standardisation in training."""
import pytest
import torch

from fsdlite.models.voxelnet.norm import FeatureStandardizer


def _volumes(offsets, rows=50, seed=0):
    """One (rows, 2) batch per offset: a 'volume' whose whole feature level is shifted."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(rows, 2, generator=gen, dtype=torch.float64) + off for off in offsets]


def test_batch_mode_erases_the_volume_level_running_mode_keeps_it():
    light, heavy = _volumes([0.0, 3.0])
    batch = FeatureStandardizer(2).double()
    # batch statistics of a one-volume batch: every volume comes out centred, the material level is gone
    with torch.no_grad():
        assert abs(float(batch(light).mean()) - float(batch(heavy).mean())) < 1e-6
    running = FeatureStandardizer(2, train_stats='running', momentum=None).double()
    running(torch.cat([light, heavy]))                       # statistics seen so far: both volumes
    running.eval()
    with torch.no_grad():
        gap = float(running(heavy).mean() - running(light).mean())
    assert gap > 1.4                       # 3 / sqrt(1 + 1.5^2) = 1.66: the level difference between volumes stays


def test_first_batch_initialises_and_none_momentum_averages_cumulatively():
    a, b = _volumes([1.0, -2.0], seed=1)
    norm = FeatureStandardizer(2, train_stats='running', momentum=None).double()
    out = norm(a)
    torch.testing.assert_close(norm.running_mean, a.mean(0))
    torch.testing.assert_close(out, (a - a.mean(0)) / torch.sqrt(a.var(0) + 1e-5))   # unbiased running var
    norm(b)
    torch.testing.assert_close(norm.running_mean, (a.mean(0) + b.mean(0)) / 2)
    assert int(norm.num_batches_tracked) == 2


def test_running_mode_trains_like_it_evaluates_and_passes_gradients():
    norm = FeatureStandardizer(2, log_features=(0,), train_stats='running', momentum=0.5).double()
    x = torch.rand(30, 2, dtype=torch.float64).requires_grad_(True) + 0.1
    train_out = norm(x)
    norm.eval()
    torch.testing.assert_close(norm(x), train_out)
    train_out.square().sum().backward()          # (a plain sum is 0 when the batch is the statistics)
    assert norm.weight.grad is not None and norm.weight.grad.abs().sum() > 0


def test_bad_options():
    with pytest.raises(ValueError, match="train_stats must be 'batch' or 'running', got 'moving'"):
        FeatureStandardizer(2, train_stats='moving')
    with pytest.raises(ValueError, match=r'momentum must be in \(0, 1\] or None, got 1.5'):
        FeatureStandardizer(2, momentum=1.5)


def test_voxelnet_config_uses_running_statistics(build_voxelnet, inputs):
    model = build_voxelnet()
    assert model.input_norm.train_stats == 'running' and model.voxel_norm.train_stats == 'running'
    assert model.voxel_norm.num_features == model.muon_stage.out_channels
    feats, centres = inputs(1, 18, 30)
    model.train()
    with torch.no_grad():
        train_out = model(dict(muon_features=feats, voxel_centres=centres))
        model.eval()
        eval_out = model(dict(muon_features=feats, voxel_centres=centres))
    # one batch seen: running statistics = that batch's, so training and evaluation agree on it
    torch.testing.assert_close(train_out, eval_out)


def test_loaded_statistics_are_continued_not_reinitialised():
    """The batch count is saved; a state dict without it (older checkpoints) loads strictly and counts as fitted."""
    torch.manual_seed(0)
    fitted = FeatureStandardizer(3, train_stats='running', momentum=None).train()
    for _ in range(5):
        fitted(torch.randn(64, 3) * 2 + 5)
    state = fitted.state_dict()
    assert int(state['num_batches_tracked']) == 5
    for saved in (state, {k: v for k, v in state.items() if k != 'num_batches_tracked'}):
        loaded = FeatureStandardizer(3, train_stats='running', momentum=None)
        loaded.load_state_dict(saved, strict=True)
        assert int(loaded.num_batches_tracked) == (5 if 'num_batches_tracked' in saved else
                                                   FeatureStandardizer.LOADED_STATS_BATCHES)
        before = loaded.running_mean.clone()
        loaded.train()(torch.zeros(64, 3))   # one far-off batch moves the statistics a little, not onto it
        moved = (loaded.running_mean - before).abs().max()
        assert 0 < moved < 0.5 * before.abs().min()
