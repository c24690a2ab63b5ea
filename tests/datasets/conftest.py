"""Fixtures shared by the lidar dataset / transform tests."""
import copy

import pytest

from fsdlite.registry import DATASETS

SMALL_LIDAR = dict(num_beams=16, azimuth_resolution=0.4)  # ~2-3k points per frame: fast tests


@pytest.fixture
def small_lidar():
    """Options of a coarse lidar for fast synthetic frames."""
    return dict(SMALL_LIDAR)


@pytest.fixture
def synthetic_dataset():
    """Factory: a small SyntheticLidarDataset built through the registry (pipeline [] -> raw results)."""

    def build(pipeline=(), **kwargs):
        cfg = dict(type='SyntheticLidarDataset', num_frames=4, lidar=dict(SMALL_LIDAR), pipeline=list(pipeline))
        cfg.update(kwargs)
        return DATASETS.build(copy.deepcopy(cfg))

    return build


@pytest.fixture
def raw_frame(synthetic_dataset):
    """Factory: the raw results dict (before any pipeline) of synthetic frame ``index``."""
    dataset = synthetic_dataset(num_frames=8)
    return lambda index=0: dataset.raw_results(index)


@pytest.fixture
def kitti_folder(shared_data):
    """shared/data/kitti_object_000008 (open-mmlab/mmdetection3d@fe25f7a:demo/data/kitti/000008.*)."""
    return shared_data / 'kitti_object_000008'
