"""SigmoidFocalLoss against a hand computation, reductions, label targets, properties."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.models.losses import SigmoidFocalLoss
from fsdlite.registry import MODELS


def _hand(x, t, gamma, alpha):
    p = 1 / (1 + math.exp(-x))
    if t == 1:
        return -alpha * (1 - p) ** gamma * math.log(p)
    return -(1 - alpha) * p ** gamma * math.log(1 - p)


def test_matches_hand_computation():
    logits = torch.tensor([[2.0, -1.0, 0.5], [-0.3, 0.0, 3.0]], dtype=torch.float64)
    labels = torch.tensor([1, 3])  # second row: background (all-zero targets)
    loss = SigmoidFocalLoss(gamma=3.0, alpha=0.8, reduction='none')(logits, labels)
    targets = [[0, 1, 0], [0, 0, 0]]
    for i in range(2):
        for c in range(3):
            assert loss[i, c].item() == pytest.approx(_hand(logits[i, c].item(), targets[i][c], 3.0, 0.8), rel=1e-9)


def test_reductions_and_weight():
    logits = torch.randn(5, 3)
    labels = torch.tensor([0, 1, 2, 3, 3])
    elem = SigmoidFocalLoss(reduction='none')(logits, labels)
    assert torch.allclose(SigmoidFocalLoss(reduction='sum')(logits, labels), elem.sum())
    assert torch.allclose(SigmoidFocalLoss()(logits, labels), elem.mean())
    assert torch.allclose(SigmoidFocalLoss(loss_weight=2.0)(logits, labels, avg_factor=3), 2 * elem.sum() / 3)
    weight = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0])
    assert torch.allclose(SigmoidFocalLoss(reduction='sum')(logits, labels, weight=weight),
                          (elem * weight[:, None]).sum())
    one_hot = torch.nn.functional.one_hot(labels, 4)[:, :3].float()
    assert torch.allclose(SigmoidFocalLoss(reduction='sum')(logits, one_hot), elem.sum())


def test_gamma_zero_is_weighted_bce():
    logits, targets = torch.randn(6, 2), torch.randint(0, 2, (6, 2)).float()
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction='none')
    assert torch.allclose(SigmoidFocalLoss(gamma=0.0, alpha=-1, reduction='none')(logits, targets), bce)


def test_registered_and_bad_arguments():
    assert isinstance(MODELS.build(dict(type='SigmoidFocalLoss', gamma=3.0, alpha=0.8)), SigmoidFocalLoss)
    with pytest.raises(ValueError, match='reduction'):
        SigmoidFocalLoss(reduction='avg')
    with pytest.raises(ValueError, match='gamma'):
        SigmoidFocalLoss(gamma=-1)
    loss = SigmoidFocalLoss()
    with pytest.raises(ValueError, match=r'label targets must lie in \[0, 3\]'):
        loss(torch.zeros(2, 3), torch.tensor([0, 4]))
    with pytest.raises(ValueError, match='targets must be'):
        loss(torch.zeros(2, 3), torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r'logits must be \(N, C\)'):
        loss(torch.zeros(3), torch.zeros(3, dtype=torch.long))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 6), st.integers(1, 4), st.floats(0, 4), st.floats(0, 1), st.integers(0, 1000))
def test_properties(n, c, gamma, alpha, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, c, generator=g, dtype=torch.float64) * 3
    labels = torch.randint(0, c + 1, (n,), generator=g)
    elem = SigmoidFocalLoss(gamma=gamma, alpha=alpha, reduction='none')(logits, labels)
    assert elem.shape == (n, c) and (elem >= 0).all() and torch.isfinite(elem).all()
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, torch.nn.functional.one_hot(labels, c + 1)[:, :c].double(), reduction='none')
    assert (elem <= bce + 1e-12).all()  # focal weights are <= 1
    assert SigmoidFocalLoss(reduction='sum')(logits, labels).item() == pytest.approx(
        SigmoidFocalLoss(reduction='none')(logits, labels).sum().item())


def test_alpha_zero_and_one_are_valid_weights():
    # alpha in [0, 1] weights positives by alpha and negatives by 1 - alpha; only negative alpha disables it
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.3]], dtype=torch.float64)
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    unweighted = SigmoidFocalLoss(gamma=2.0, alpha=-1, reduction='none')(logits, targets)
    zero = SigmoidFocalLoss(gamma=2.0, alpha=0.0, reduction='none')(logits, targets)
    assert torch.equal(zero * targets, torch.zeros_like(zero))  # positives weighted 0
    assert torch.allclose(zero * (1 - targets), unweighted * (1 - targets))
    one = SigmoidFocalLoss(gamma=2.0, alpha=1.0, reduction='none')(logits, targets)
    assert torch.equal(one * (1 - targets), torch.zeros_like(one))  # negatives weighted 0
    assert torch.allclose(one * targets, unweighted * targets)
    for x, t in ((2.0, 1), (0.5, 0)):
        assert SigmoidFocalLoss(gamma=2.0, alpha=0.0, reduction='none')(
            torch.tensor([[x]], dtype=torch.float64), torch.tensor([[float(t)]], dtype=torch.float64)
        ).item() == pytest.approx(_hand(x, t, 2.0, 0.0), abs=1e-12)
    with pytest.raises(ValueError, match='alpha'):
        SigmoidFocalLoss(alpha=1.0 + 1e-9)
    with pytest.raises(ValueError, match='alpha'):  # nan would silently turn the weighting off
        SigmoidFocalLoss(alpha=float('nan'))
