"""fsdlite.evaluation.functional.localisation: matching by centre distance and the errors of hand-made boxes."""
import numpy as np
import pytest

from fsdlite.evaluation.functional.localisation import (concatenate_errors, localisation_errors,
                                                        summarise_errors)


def test_errors_of_hand_made_boxes():
    """A car 20 m ahead (sight along +x), one 10 m to the left (sight along +y); predictions moved, resized and
    turned by known amounts; a far-away and a low-score prediction stay unmatched."""
    gt = np.array([[20.0, 0.0, -1.0, 4.0, 1.6, 1.5, 0.0],
                   [0.0, 10.0, -1.0, 4.0, 1.6, 1.5, np.pi / 2]])
    pred = np.array([[20.5, 0.2, -0.9, 4.3, 1.5, 1.5, np.radians(5.0)],        # further, left, longer, turned
                     [0.3, 9.6, -1.0, 3.8, 1.6, 1.7, np.pi / 2 + np.pi - np.radians(3.0)],  # flipped heading
                     [40.0, 0.0, -1.0, 4.0, 1.6, 1.5, 0.0],                     # no truth within 2 m
                     [20.0, 0.0, -1.0, 4.0, 1.6, 1.5, 0.0]])                    # below min_score
    errors = localisation_errors(pred, [0.9, 0.8, 0.95, 0.1], gt)
    np.testing.assert_allclose(errors['radial'], [0.5, -0.4], atol=1e-9)
    np.testing.assert_allclose(errors['lateral'], [0.2, -0.3], atol=1e-9)  # left of the line of sight is +
    np.testing.assert_allclose(errors['dz'], [0.1, 0.0], atol=1e-9)
    np.testing.assert_allclose(errors['dl'], [0.3, -0.2], atol=1e-9)
    np.testing.assert_allclose(errors['dw'], [-0.1, 0.0], atol=1e-9)
    np.testing.assert_allclose(errors['dh'], [0.0, 0.2], atol=1e-9)
    np.testing.assert_allclose(errors['dyaw'], [5.0, -3.0], atol=1e-9)  # a 180-degree turn is no error
    np.testing.assert_allclose(errors['range'], [20.0, 10.0])
    summary = summarise_errors(concatenate_errors([errors, localisation_errors([], [], gt)]))
    assert summary['matches'] == 2 and summary['dyaw_median_abs'] == pytest.approx(4.0)
    assert summary['dl_bias'] == pytest.approx(0.05)


def test_each_truth_is_matched_once_best_score_first():
    gt = np.array([[10.0, 0.0, 0.0, 4.0, 1.6, 1.5, 0.0]])
    pred = np.array([[10.5, 0.0, 0.0, 4.0, 1.6, 1.5, 0.0], [10.1, 0.0, 0.0, 4.0, 1.6, 1.5, 0.0]])
    errors = localisation_errors(pred, [0.9, 0.4], gt)
    np.testing.assert_allclose(errors['radial'], [0.5])  # the better-scored box takes it, the closer one is left
    assert summarise_errors(localisation_errors(pred, [0.9, 0.4], np.zeros((0, 7))))['matches'] == 0


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match=r'pred_boxes must be an \(N, 7\) array'):
        localisation_errors(np.zeros((2, 6)), [1, 1], np.zeros((1, 7)))
    with pytest.raises(ValueError, match='one score per predicted box'):
        localisation_errors(np.zeros((2, 7)), [1], np.zeros((1, 7)))
    with pytest.raises(ValueError, match='max_distance must be >= 0'):
        localisation_errors(np.zeros((2, 7)), [1, 1], np.zeros((1, 7)), max_distance=-1)
