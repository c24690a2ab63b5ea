"""The simulated world against real KITTI scans (../shared/data/kitti_tiny_3d: WenyiZhang0311/kitti_tiny_3d@dbd974d,
30 official KITTI object training frames): both cropped to the camera's view, compared on the statistics of
:func:`fsdlite.datasets.sim.statistics.scan_statistics` within the tolerances stated here."""
import numpy as np
import pytest

from fsdlite.datasets.sim.statistics import format_statistics, labelled_frames, scan_statistics
from fsdlite.registry import DATASETS

TOLERANCE = dict(points_per_frame=0.25,      # relative
                 cars_per_frame=(2.0, 6.0),   # ratio; busier on purpose (test_cars_per_frame)
                 elevation_share=0.04,       # absolute, per elevation band
                 range_share=0.06,           # absolute, per range band
                 above_ground=0.12,          # absolute
                 reflectance_quantiles=0.06,  # absolute, quartiles and 90 %
                 zero_reflectance=0.05,      # absolute
                 car_points=(0.5, 2.0),      # ratio of medians per distance band
                 car_yaw=(0.7, 1.4),         # ratio of the median and 75 % quantile of the cars' |yaw|
                 # ratio; the simulator has 1/5-2/5 of the real clutter (24-frame samples of it spread that much)
                 clutter_behind_cars=(0.15, 3.0),
                 car_far_end_gap=0.25,       # absolute, m
                 car_near_face_depth=0.05,   # absolute, m (upright simulated ends gave 0.03 against the real 0.13)
                 pedestrian_reflectance=0.08)  # absolute


@pytest.fixture(scope='module')
def statistics(shared_data):
    real = DATASETS.build(dict(type='KittiDataset', data_root=str(shared_data / 'kitti_tiny_3d'),
                               ann_file='ImageSets/trainval.txt', camera_fov=True, test_mode=True,
                               data_prefix=dict(pts='velodyne', label='label_2', calib='calib'),
                               metainfo=dict(classes=('Car', 'Pedestrian'))))
    sim = DATASETS.build(dict(type='SyntheticLidarDataset', split='test', num_frames=24,
                              metainfo=dict(classes=('Car', 'Pedestrian'))))
    stats = scan_statistics(labelled_frames(real, 30)), scan_statistics(labelled_frames(sim, 24))
    print(format_statistics([('real', stats[0]), ('simulated', stats[1])]))
    return stats


def test_points_per_frame_and_per_elevation(statistics):
    real, sim = statistics
    assert abs(sim['points_per_frame'] / real['points_per_frame'] - 1) < TOLERANCE['points_per_frame']
    assert np.abs(sim['elevation_share'] - real['elevation_share']).max() < TOLERANCE['elevation_share']


def test_cars_per_frame(statistics):
    """The simulated streets hold 2-6 times the cars of these frames (KITTI's 7,481 training frames hold 3.8 labelled
    cars each, these 30 frames 2.1): busier on purpose, as mmdet3d's ground-truth sampling pastes cars into KITTI
    frames, because a short training on KITTI-like streets sees too few cars to place their boxes well."""
    real, sim = statistics
    low, high = TOLERANCE['cars_per_frame']
    assert low < sim['cars_per_frame'] / real['cars_per_frame'] < high, (sim['cars_per_frame'],
                                                                          real['cars_per_frame'])


def test_range_histogram_and_structure_above_ground(statistics):
    real, sim = statistics
    assert np.abs(sim['range_share'] - real['range_share']).max() < TOLERANCE['range_share']
    assert abs(sim['above_ground'] - real['above_ground']) < TOLERANCE['above_ground']


def test_reflectance(statistics):
    real, sim = statistics
    quartiles = slice(1, 5)
    assert np.abs(sim['reflectance_quantiles'][quartiles] - real['reflectance_quantiles'][quartiles]).max() \
        < TOLERANCE['reflectance_quantiles']
    assert abs(sim['zero_reflectance'] - real['zero_reflectance']) < TOLERANCE['zero_reflectance']
    assert sim['car_reflectance_median'] < 0.15 and real['car_reflectance_median'] < 0.15  # dark paint, glass


def test_points_on_cars_by_distance(statistics):
    real, sim = statistics
    ratio = sim['car_points'] / real['car_points']
    low, high = TOLERANCE['car_points']
    assert np.all((ratio > low) & (ratio < high)), ratio


def test_cars_turned_against_the_sensor_heading(statistics):
    """Real streets do not all run along the ego heading (the cars of a frame share its turn): the simulated
    cars' |yaw| spreads as the real ones' (median and 75 % quantile; the 90 % one is the simulated cross traffic)."""
    real, sim = statistics
    ratio = sim['car_yaw_quantiles'][:2] / real['car_yaw_quantiles'][:2]
    low, high = TOLERANCE['car_yaw']
    assert np.all((ratio > low) & (ratio < high)), (sim['car_yaw_quantiles'], real['car_yaw_quantiles'])


def test_clutter_just_behind_cars(statistics):
    """Walls, hedges and what is seen through car windows 0-3 m behind cars: a detector trained without it stretches
    real cars' boxes into it."""
    real, sim = statistics
    low, high = TOLERANCE['clutter_behind_cars']
    assert low < sim['clutter_behind_cars'] / real['clutter_behind_cars'] < high


def test_cars_seen_to_their_far_end(statistics):
    """Seen from behind, a real car's side runs to the far end of its box: a simulator whose cars round their
    corners wide shows a detector less of each car than a real scan does."""
    real, sim = statistics
    assert abs(sim['car_far_end_gap'] - real['car_far_end_gap']) < TOLERANCE['car_far_end_gap'], \
        (sim['car_far_end_gap'], real['car_far_end_gap'])


def test_end_on_cars_seen_behind_their_box_face(statistics):
    """Seen end-on, a real car's lower body lies a hand's width behind its box's near face (bumpers, ends leaning
    back): a simulator with upright ends teaches a detector to put real cars' boxes too far from the sensor."""
    real, sim = statistics
    assert abs(sim['car_near_face_depth'] - real['car_near_face_depth']) < TOLERANCE['car_near_face_depth'], \
        (sim['car_near_face_depth'], real['car_near_face_depth'])


def test_pedestrians_read_bright(statistics):
    """Clothes are bright at 905 nm whatever their colour (real pedestrians read about twice what poles do): a
    simulator with dark clothes cannot teach a detector to tell a person from a pole by reflectance."""
    real, sim = statistics
    assert abs(sim['pedestrian_reflectance'] - real['pedestrian_reflectance']) < TOLERANCE['pedestrian_reflectance'], \
        (sim['pedestrian_reflectance'], real['pedestrian_reflectance'])
