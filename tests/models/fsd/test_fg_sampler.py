"""Foreground sampling: thresholds, per-(sample, class) budgets, warm-up top-k."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fsdlite.models.fsd.coders import encode_vote
from fsdlite.models.fsd.fg_sampler import ForegroundSampler
from fsdlite.models.fsd.indexing import mask_to_index

RANGE = (0, -10, -3, 20, 10, 1)


def test_mask_to_index():
    assert mask_to_index(torch.tensor([False, True, True, False, True])).tolist() == [1, 2, 4]
    assert mask_to_index(torch.zeros(0, dtype=torch.bool)).shape == (0,)
    with pytest.raises(ValueError, match='bool'):
        mask_to_index(torch.tensor([1, 0]))


def _inputs():
    # 2 samples x 3 points, 2 classes
    scores = torch.tensor([[0.9, 0.1], [0.8, 0.7], [0.2, 0.95],
                           [0.6, 0.0], [0.65, 0.0], [0.1, 0.0]])
    xyz = torch.tensor([[1.0, 0, 0], [2, 0, 0], [3, 0, 0], [4, 0, 0], [5, 0, 0], [6, 0, 0]])
    offsets = torch.zeros(6, 2, 3)
    offsets[:, 0, 0] = 1.0   # class 0 votes +1 m in x
    offsets[:, 1, 1] = -4.0  # class 1 votes -4 m in y
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    return scores, encode_vote(offsets), xyz, batch


def test_threshold_and_budget():
    sampler = ForegroundSampler(2, score_thresholds=(0.5, 0.5), max_per_class=(1, 5), point_range=RANGE)
    fg = sampler(*_inputs(), batch_size=2)
    got = sorted(zip(fg.point_index.tolist(), fg.class_id.tolist()))
    # class 0: sample 0 has 0.9, 0.8 above -> budget 1 keeps point 0; sample 1 has 0.6, 0.65 -> keeps point 4
    # class 1: points 1 (0.7) and 2 (0.95)
    assert got == [(0, 0), (1, 1), (2, 1), (4, 0)]
    assert int(fg.num_over_budget) == 2
    for p, c, centre, b, s in zip(fg.point_index, fg.class_id, fg.centre, fg.batch, fg.score):
        expected = torch.tensor([p + 1.0 + (1.0 if c == 0 else 0.0), -4.0 if c == 1 else 0.0, 0.0])
        assert torch.allclose(centre, expected)
        assert b == (0 if p < 3 else 1)
        assert s == _inputs()[0][p, c]


def _brute_force_selection(scores, batch, thresholds, budgets):
    """(point, class) pairs kept by threshold + per-(sample, class) budget, point-major, by plain loops."""
    kept = []
    n, c = scores.shape
    for p in range(n):
        for k in range(c):
            if scores[p, k] <= thresholds[k]:
                continue
            rivals = [q for q in range(n) if batch[q] == batch[p] and scores[q, k] > thresholds[k]]
            better = sum(1 for q in rivals if scores[q, k] > scores[p, k] or (scores[q, k] == scores[p, k] and q < p))
            kept.append((p, k, better >= budgets[k]))
    return [(p, k) for p, k, cut in kept if not cut], sum(cut for *_, cut in kept)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 12), st.integers(1, 12))
def test_threshold_mode_matches_brute_force(seed, budget0, budget1):
    """The brute-force selection (threshold, then the best of each (sample, class) within its budget), in
    point-major order, with the cut candidates counted."""
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(0, 30, (1,), generator=g))
    scores = torch.randint(0, 8, (n, 2), generator=g).float() / 8  # ties on purpose
    batch = torch.randint(0, 2, (n,), generator=g)
    sampler = ForegroundSampler(2, score_thresholds=(0.3, 0.5), max_per_class=(budget0, budget1), point_range=RANGE)
    fg = sampler(scores, torch.zeros(n, 2, 3), torch.zeros(n, 3), batch, batch_size=2)
    expected, cut = _brute_force_selection(scores, batch, (0.3, 0.5), (budget0, budget1))
    got = list(zip(fg.point_index.tolist(), fg.class_id.tolist()))
    assert got == sorted(got) and int(fg.num_over_budget) == cut  # point-major; the cut is counted
    # equal to the loops' selection up to which of equal scores at a budget's edge is kept (top-k's tie order)
    key = {pair: (int(batch[pair[0]]), pair[1]) for pair in expected}
    assert sorted(key[pair] for pair in expected) == sorted((int(batch[p]), k) for p, k in got)
    for p, k in set(got) ^ set(expected):
        rivals = [float(scores[q, k]) for q, kk in got if kk == k and batch[q] == batch[p]]
        assert float(scores[p, k]) == min(rivals), (p, k)


def test_threshold_offset_lowers_thresholds():
    sampler = ForegroundSampler(2, score_thresholds=0.75, max_per_class=10, point_range=RANGE)
    strict = sampler(*_inputs(), batch_size=2)
    loose = sampler(*_inputs(), batch_size=2, threshold_offset=0.2)
    assert strict.point_index.numel() == 3
    assert loose.point_index.numel() == 6


def test_topk_warmup_ignores_scores():
    sampler = ForegroundSampler(2, score_thresholds=0.99, warmup_topk=(2, 1), point_range=RANGE)
    fg = sampler(*_inputs(), batch_size=2, mode='topk')
    got = sorted(zip(fg.point_index.tolist(), fg.class_id.tolist()))
    assert got == [(0, 0), (1, 0), (2, 1), (3, 0), (3, 1), (4, 0)]


def test_centres_clamped_and_empty():
    sampler = ForegroundSampler(1, score_thresholds=0.0, point_range=RANGE)
    scores = torch.ones(1, 1)
    fg = sampler(scores, encode_vote(torch.tensor([[[100.0, -100.0, 0.0]]])), torch.zeros(1, 3),
                 torch.zeros(1, dtype=torch.int64), batch_size=1)
    assert fg.centre[0, 0] < 20 and fg.centre[0, 1] == -10
    empty = sampler(torch.zeros(0, 1), torch.zeros(0, 1, 3), torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64), 1)
    assert empty.point_index.shape == (0,) and empty.centre.shape == (0, 3)


def test_invalid_arguments():
    with pytest.raises(ValueError, match='one value per class'):
        ForegroundSampler(3, score_thresholds=(0.1, 0.2))
    with pytest.raises(ValueError, match='budgets'):
        ForegroundSampler(1, max_per_class=0)
    with pytest.raises(ValueError, match='point_range'):
        ForegroundSampler(1, point_range=(0, 0, 0, -1, 1, 1))
    sampler = ForegroundSampler(2, point_range=RANGE)
    with pytest.raises(ValueError, match='mode'):
        sampler(*_inputs(), batch_size=2, mode='all')
    with pytest.raises(ValueError, match='vote_codes'):
        sampler(torch.zeros(3, 2), torch.zeros(3, 3, 3), torch.zeros(3, 3), torch.zeros(3, dtype=torch.int64), 1)
