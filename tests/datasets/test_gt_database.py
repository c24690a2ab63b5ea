"""GT database (tools/create_gt_database.py) and the ObjectSample transform."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config

from fsdlite.datasets.gt_database import GTDatabase
from fsdlite.ops import count_points_in_boxes, points_in_boxes
from fsdlite.registry import TRANSFORMS
from fsdlite.structures.boxes import bev_overlap

REPO = Path(__file__).resolve().parents[2]
SYNTHETIC_CFG = REPO / 'configs' / '_base_' / 'datasets' / 'synthetic_lidar.py'


def load_tool():
    spec = importlib.util.spec_from_file_location('create_gt_database', REPO / 'tools' / 'create_gt_database.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def database(tmp_path_factory):
    """A database built by the tool from 6 frames of the synthetic config (coarse lidar)."""
    out = tmp_path_factory.mktemp('gt_db')
    tool = load_tool()
    assert tool.main([str(SYNTHETIC_CFG), '--out', str(out), '--num-frames', '6', '--cfg-options',
                      'train_dataloader.dataset.lidar.num_beams=16',
                      'train_dataloader.dataset.lidar.azimuth_resolution=0.4']) == 0
    return out / 'gt_database.npz'


def test_database_holds_the_points_of_each_box(database, synthetic_dataset):
    db = GTDatabase.load(database)
    assert db.classes == ('Car', 'Pedestrian', 'Cyclist') and db.meta['num_frames'] == 6
    assert len(db) > 20 and db.counts()['Car'] > 10
    frames = synthetic_dataset(num_frames=6)
    for k in range(0, len(db), 5):
        raw = frames.raw_results(int(db.frames[k]))
        row = int(torch.nonzero((raw['gt_bboxes_3d'] == db.boxes[k]).all(dim=1))[0])
        assert int(db.num_points[k]) == int(raw['num_points_in_gt'][row])
        pts = db.object_points(k)
        assert (points_in_boxes(pts, db.boxes[k:k + 1]) == 0).all()
    again = GTDatabase(db.points, db.offsets, db.boxes, db.labels, db.frames, db.classes, db.meta)
    again.save(database.parent / 'copy.npz')
    copy = GTDatabase.load(database.parent / 'copy.npz')
    assert torch.equal(copy.points, db.points) and copy.classes == db.classes


def test_object_sample_pastes_without_collisions(database, raw_frame):
    np.random.seed(0)
    sample = TRANSFORMS.build(dict(type='ObjectSample', db_path=str(database),
                                   sample_groups=dict(Car=6, Pedestrian=4, Cyclist=3), min_points=2))
    r = raw_frame(7)  # frame 7 is not in the database (built from frames 0-5)
    m0, n0 = len(r['gt_bboxes_3d']), len(r['points'])
    out = sample(r)
    added = out['num_sampled_objects']
    boxes = out['gt_bboxes_3d']
    assert added >= 1 and len(boxes) == m0 + added
    overlap = bev_overlap(boxes, boxes) & ~torch.eye(len(boxes), dtype=torch.bool)
    assert not overlap.any(), 'pasted boxes must not collide with scene boxes or each other'
    # only the pasted objects' points lie in the pasted boxes; scene points there were removed and counted
    new_points = int(out['num_points_in_gt'][m0:].sum())
    assert len(out['points']) == n0 - out['num_points_replaced'] + new_points
    idx = points_in_boxes(out['points'], boxes[m0:])
    assert int((idx >= 0).sum()) == new_points
    assert torch.equal(count_points_in_boxes(out['points'], boxes)[m0:], out['num_points_in_gt'][m0:])
    inst = out['pts_instance_mask']
    assert torch.equal(out['pts_semantic_mask'][inst >= m0], out['gt_labels_3d'][inst[inst >= m0]])
    assert int((inst >= m0).sum()) == new_points
    assert (count_points_in_boxes(out['points'], boxes[m0:]) >= 2).all()


def test_object_sample_fill_mode_and_options(database, raw_frame):
    np.random.seed(1)
    r = raw_frame(6)
    cars = int((r['gt_labels_3d'] == 0).sum())
    fill = TRANSFORMS.build(dict(type='ObjectSample', db_path=str(database), sample_groups=dict(Car=cars),
                                 fill=True))
    assert fill(r)['num_sampled_objects'] == 0  # already has that many cars
    with pytest.raises(ValueError, match=r"names classes \['Truck'\]"):
        TRANSFORMS.build(dict(type='ObjectSample', db_path=str(database), sample_groups=dict(Truck=2)))
    with pytest.raises(FileNotFoundError, match='create_gt_database.py'):
        TRANSFORMS.build(dict(type='ObjectSample', db_path=str(database.parent / 'none.npz'), sample_groups=1))
    narrow = raw_frame(6)
    narrow['points'] = narrow['points'][:, :3]
    with pytest.raises(ValueError, match='database points have 4 columns but the scene has 3'):
        TRANSFORMS.build(dict(type='ObjectSample', db_path=str(database), sample_groups=dict(Car=5)))(narrow)


def test_synthetic_config_builds_and_gt_sample_pipeline(database):
    from fsdlite.registry import DATASETS
    cfg = Config.fromfile(SYNTHETIC_CFG)
    ds_cfg = cfg.train_dataloader.dataset
    ds_cfg.update(num_frames=2, lidar=dict(ds_cfg.lidar, num_beams=16, azimuth_resolution=0.4))
    ds_cfg.pipeline = [dict(step, db_path=str(database)) if step['type'] == 'ObjectSample' else step
                       for step in cfg.train_pipeline_gt_sample]
    np.random.seed(2)
    item = DATASETS.build(ds_cfg)[0]
    meta = item['data_samples'].metainfo
    assert meta['num_sampled_objects'] >= 1 and 'num_points_replaced' in meta
    val = DATASETS.build(dict(cfg.val_dataloader.dataset, num_frames=1))
    assert val.split == 'val' and val.test_mode


def test_tool_rejects_bad_arguments(tmp_path):
    tool = load_tool()
    with pytest.raises(SystemExit):
        tool.main([str(SYNTHETIC_CFG), '--out', str(tmp_path), '--num-frames', '0'])
    cfg = Config(dict(val_dataloader=dict()))
    with pytest.raises(KeyError, match='no train_dataloader'):
        tool.training_dataset_cfg(cfg)
    wrapped = Config(dict(train_dataloader=dict(dataset=dict(type='RepeatDataset', times=2,
                                                             dataset=dict(type='SyntheticLidarDataset')))))
    assert tool.training_dataset_cfg(wrapped)['type'] == 'SyntheticLidarDataset'
