"""fsdlite.datasets.sim.statistics on hand-made frames (the real-against-simulated comparison: test_realism.py)."""
import numpy as np
import pytest
import torch

from fsdlite.datasets.sim.statistics import (YAW_QUANTILES, car_far_end_gaps, car_near_face_depths, clutter_behind_cars,
                                             format_statistics, labelled_frames, scan_statistics)


def test_car_yaw_is_folded_against_the_sensor_heading():
    """A box and its 180-degree turn are one orientation: yaws 0, pi, -10 deg, 100 deg, 190 deg fold to 0, 0, 10,
    80 and 10 degrees."""
    yaws = np.radians([0.0, 180.0, -10.0, 100.0, 190.0])
    boxes = np.array([[10.0 + 5 * i, 0.0, -1.5, 4.0, 1.6, 1.5, yaw] for i, yaw in enumerate(yaws)], np.float32)
    points = np.array([[10.0, 0.0, -1.0, 0.2], [30.0, 5.0, 0.5, 0.0]], np.float32)
    stats = scan_statistics([(points, boxes), (points, np.zeros((0, 7), np.float32))])
    np.testing.assert_allclose(stats['car_yaw_quantiles'], np.percentile([0, 0, 10, 80, 10], YAW_QUANTILES),
                               atol=1e-3)
    assert 'car |yaw| deg q50/75/90' in format_statistics([('hand-made', stats)])
    assert stats['cars_per_frame'] == 0.5  # frame 1: one of its five cars holds a point; frame 2: no cars
    assert np.isnan(scan_statistics([(points, np.zeros((0, 7), np.float32))])['car_yaw_quantiles']).all()


def test_clutter_behind_cars_counts_only_unlabelled_points_just_behind():
    car = np.array([10.0, 0.0, -1.7, 4.0, 2.0, 1.5, 0.0])  # far corners at x = 12, |y| = 1
    on_car = np.stack([np.linspace(8.2, 11.8, 60), np.linspace(-0.8, 0.8, 60), np.full(60, -1.0)], 1)
    behind = [[12.5, 0.0, -1.2], [13.5, 0.3, -0.8]]       # 0.5-1.5 m behind, at car heights: counted
    not_behind = [[16.0, 0.0, -1.0],                       # more than 3 m behind
                  [13.0, 0.0, -1.65],                      # at ground level
                  [13.0, 4.0, -1.0],                       # outside the car's azimuth span
                  [8.0, 0.0, -1.0],                        # in front of it
                  [14.5, 0.2, -1.0]]                       # on another labelled car
    other = np.array([15.0, 0.0, -1.7, 2.0, 2.0, 1.5, 0.0])  # too few points of its own to count as a car
    points = np.concatenate([on_car, behind, not_behind])
    points = np.concatenate([points, np.zeros((len(points), 1))], 1)
    assert clutter_behind_cars(points, np.stack([car, other])) == (2, 60)
    assert clutter_behind_cars(points, car[None]) == (3, 60)
    assert clutter_behind_cars(points[:10], car[None]) == (0, 0)  # under min_points on the car


def test_far_end_gap_is_measured_from_the_end_away_from_the_sensor():
    # a car 10 m ahead, long axis along x: its near end at x = 8, its far end at x = 12
    car = np.array([10.0, 2.0, -1.7, 4.0, 2.0, 1.5, 0.0])
    side = np.stack([np.linspace(8.0, 11.7, 40), np.full(40, 1.0), np.full(40, -1.0)], 1)  # seen to 0.3 m short
    mirror = [[10.5, 0.8, -0.8]]                     # 0.2 m outside the width: counts, not the farthest
    beyond = [[12.4, 2.0, -1.0], [11.9, 2.0, -1.68]]  # past the far end, under 0.1 m above the box bottom: ignored
    points = np.concatenate([side, mirror, beyond])
    np.testing.assert_allclose(car_far_end_gaps(points, car[None]), [0.3])
    turned = car.copy()
    turned[6] = np.pi  # the same box turned end for end: the far end is still the one at x = 12
    np.testing.assert_allclose(car_far_end_gaps(points, turned[None]), [0.3])
    behind = car * [-1, -1, 1, 1, 1, 1, 1]            # mirrored to x = -10: the far end is at x = -12
    np.testing.assert_allclose(car_far_end_gaps(points * [-1, -1, 1], behind[None]), [0.3])
    assert len(car_far_end_gaps(points[:20], car[None])) == 0          # under min_points
    assert len(car_far_end_gaps(points, (car + [0, 8, 0, 0, 0, 0, 0])[None])) == 0  # no points on it
    crossing = car.copy()
    crossing[6] = np.pi / 2  # seen from its side: not counted
    assert len(car_far_end_gaps(points, crossing[None])) == 0


def test_near_face_depth_is_measured_from_the_end_facing_the_sensor():
    # a car 10 m ahead, long axis along x, 1.5 m tall from z = -1.7: its near face at x = 8
    car = np.array([10.0, 0.0, -1.7, 4.0, 2.0, 1.5, 0.0])
    y = np.linspace(-0.7, 0.7, 25)
    face = np.stack([np.full(25, 8.1), y, np.full(25, -1.2)], 1)             # 0.1 m behind the face, mid-height
    ignored = [[8.05, 0.95, -1.2],                                            # outside the middle 80 % of the width
               [8.0, 0.0, -1.55],                                             # under 0.2 of the height
               [9.5, 0.0, -0.6]]                                              # above 0.6 of the height
    points = np.concatenate([face, ignored])
    np.testing.assert_allclose(car_near_face_depths(points, car[None]), [0.1], atol=1e-6)
    turned = car.copy()
    turned[6] = np.pi  # turned end for end: the face towards the sensor is still the one at x = 8
    np.testing.assert_allclose(car_near_face_depths(points, turned[None]), [0.1], atol=1e-6)
    ahead = np.concatenate([face[:20] - [0.2, 0, 0], face[20:]])  # most of it 0.1 m in front of the face
    np.testing.assert_allclose(car_near_face_depths(ahead, car[None]), [-0.1], atol=1e-6)
    assert len(car_near_face_depths(points[:19], car[None])) == 0            # under min_points
    slanted = car.copy()
    slanted[6] = np.radians(20)  # its axis 20 deg off the line of sight: not end-on
    assert len(car_near_face_depths(points, slanted[None])) == 0
    assert len(car_near_face_depths(points, (car + [40, 0, 0, 0, 0, 0, 0])[None])) == 0  # beyond 40 m


def test_pedestrian_reflectance_is_the_median_of_per_person_medians():
    person = np.array([8.0, 0.0, -1.7, 0.6, 0.6, 1.7, 0.0])
    rng = np.random.default_rng(0)

    def body(x, reading, n):  # n points inside a pedestrian box at (x, 0) reading ``reading``
        xyz = np.stack([x + rng.uniform(-0.2, 0.2, n), rng.uniform(-0.2, 0.2, n), rng.uniform(-1.5, 0.0, n)], 1)
        return np.concatenate([xyz, np.full((n, 1), reading)], 1)

    people = np.stack([person, person + [4, 0, 0, 0, 0, 0, 0], person + [8, 0, 0, 0, 0, 0, 0]])
    points = np.concatenate([body(8.0, 0.3, 20), body(12.0, 0.5, 20), body(16.0, 0.9, 5)]).astype(np.float32)
    no_cars = np.zeros((0, 7), np.float32)
    stats = scan_statistics([(points, no_cars, people), (points, no_cars)])
    assert stats['pedestrian_reflectance'] == pytest.approx(0.4)  # the third has under 10 points
    assert 'median reflectance on pedestrians' in format_statistics([('hand-made', stats)])
    assert np.isnan(scan_statistics([(points, no_cars)])['pedestrian_reflectance'])


class _Frames:
    metainfo = dict(classes=('Car', 'Pedestrian', 'Cyclist'))

    def __len__(self):
        return 2

    def raw_results(self, i):
        boxes = torch.arange(21, dtype=torch.float32).view(3, 7) + i
        return dict(points=torch.zeros(4, 4), gt_bboxes_3d=boxes, gt_labels_3d=torch.tensor([1, 0, 2]))


def test_labelled_frames_split_cars_and_pedestrians():
    frames = list(labelled_frames(_Frames()))
    assert len(frames) == 2 and len(list(labelled_frames(_Frames(), 1))) == 1
    points, cars, people = frames[1]
    np.testing.assert_array_equal(cars, np.arange(7, 14)[None] + 1)
    np.testing.assert_array_equal(people, np.arange(7)[None] + 1)
    wrong = _Frames()
    wrong.metainfo = dict(classes=('Pedestrian', 'Car'))
    with pytest.raises(ValueError, match="classes must begin with"):
        next(labelled_frames(wrong))
