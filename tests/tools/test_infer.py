"""init_model / inference_detector and tools/infer.py on a real KITTI frame (../shared/data/kitti_tiny_3d:
WenyiZhang0311/kitti_tiny_3d@dbd974d), with clear errors for bad inputs."""
import json
import shutil

from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.structures import InstanceData

from fsdlite.apis import frame_points, inference_detector, init_model, predict_item, score_samples
from fsdlite.apis.inference import inference_pipeline
from fsdlite.datasets.kitti_format import lidar2cam_from_calib, read_calib, read_label
from fsdlite.engine.checkpoint import CheckpointMismatchError
from fsdlite.registry import DATASETS, MODELS
from fsdlite.structures.boxes import camera_to_lidar_boxes
from fsdlite.structures.camera import camera_fov_mask, lidar2img_from_calib

REPO = Path(__file__).resolve().parents[2]
CONFIG = 'configs/fsd/fsdlite_kitti_tiny.py'


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
    """Weights of the config's model (random init: the contract, not the accuracy, is tested here)."""
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(str(REPO / CONFIG)).model)
    path = tmp_path_factory.mktemp('ckpt') / 'weights.pth'
    torch.save(dict(state_dict=model.state_dict()), path)
    return path


@pytest.fixture
def frame(shared_data, tmp_path):
    """A KITTI layout with one real frame: velodyne/000025.bin and calib/000025.txt."""
    tiny = shared_data / 'kitti_tiny_3d'
    for sub, ext in (('velodyne', 'bin'), ('calib', 'txt')):
        (tmp_path / sub).mkdir()
        shutil.copy(tiny / sub / f'000025.{ext}', tmp_path / sub / f'000025.{ext}')
    return tmp_path


def test_init_model_and_inference_on_a_real_frame(checkpoint, frame):
    model = init_model(CONFIG, str(checkpoint))
    assert not model.training and model.dataset_meta['classes'] == ('Car', 'Pedestrian', 'Cyclist')
    calib = read_calib(frame / 'calib' / '000025.txt')
    lidar2img = lidar2img_from_calib(calib)
    result = inference_detector(model, str(frame / 'velodyne' / '000025.bin'), lidar2img=lidar2img)
    pred = result.pred_instances_3d
    assert pred.bboxes_3d.shape[1] == 7 and len(pred.scores_3d) == len(pred.labels_3d) == len(pred.bboxes_3d)
    assert ((pred.labels_3d >= 0) & (pred.labels_3d < 3)).all()
    points, info = frame_points(model, str(frame / 'velodyne' / '000025.bin'), lidar2img)
    assert info['num_points_out_of_view'] > 90000 and camera_fov_mask(points, lidar2img).all()
    # the same points given as an array give the same detections
    again = inference_detector(model, points.numpy()).pred_instances_3d
    assert torch.equal(again.bboxes_3d, pred.bboxes_3d)
    both = inference_detector(model, [points, points.numpy()])
    assert len(both) == 2


def test_infer_tool_writes_png_json_and_kitti_lines(tools, checkpoint, frame, tmp_path):
    out = tmp_path / 'out'
    proc = tools.run(['tools/infer.py', CONFIG, checkpoint, frame / 'velodyne', '--out', out])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ['000025.json', '000025.png', '000025.txt']
    summary = json.loads((out / '000025.json').read_text())
    assert summary['calib'].endswith('calib/000025.txt') and summary['camera_fov']
    lines = [line.split() for line in (out / '000025.txt').read_text().splitlines()]
    assert all(len(fields) == 16 for fields in lines)
    assert len(lines) == summary['num_detections'] - summary['num_outside_image']
    objects = read_label(out / '000025.txt')  # the label reader reads result lines back
    if objects:  # each line is one of the detections: same box (camera -> lidar) and score
        calib = read_calib(frame / 'calib' / '000025.txt')
        cam = torch.tensor([o['box_camera'] for o in objects], dtype=torch.float64)
        lidar = camera_to_lidar_boxes(cam, lidar2cam_from_calib(calib)).numpy()
        boxes, scores = np.array(summary['boxes_3d']), np.array(summary['scores'])
        nearest = np.abs(lidar[:, None, :3] - boxes[None, :, :3]).sum(-1).argmin(1)
        assert np.abs(lidar[:, :3] - boxes[nearest, :3]).max() < 1e-3
        assert np.allclose([o['score'] for o in objects], scores[nearest], atol=1e-5)
    assert 'calib' in proc.stdout and 'wrote 1 frames' in proc.stdout


@pytest.mark.parametrize('case', ['not_a_point_cloud', 'empty_folder', 'other_config', 'missing_calib'])
def test_infer_tool_bad_inputs(tools, checkpoint, frame, tmp_path, case):
    args = ['tools/infer.py', CONFIG, checkpoint, frame / 'velodyne', '--out', tmp_path / 'out']
    expected = {'not_a_point_cloud': 'load_dim', 'empty_folder': 'holds no .bin',
                'other_config': 'does not belong to config', 'missing_calib': 'no calib file'}[case]
    if case == 'not_a_point_cloud':
        (frame / 'velodyne' / '000025.bin').write_bytes(b'not a point cloud\n' * 3)  # 13.5 float32 values
    elif case == 'empty_folder':
        args[3] = tmp_path / 'empty'
        args[3].mkdir()
    elif case == 'other_config':
        args[1] = 'configs/fsdv2/fsdv2lite_kitti_tiny.py'
    else:
        args += ['--calib', tmp_path / 'nowhere']
    proc = tools.run(args)
    assert proc.returncode == 2 and expected in proc.stderr and 'Traceback' not in proc.stderr, proc.stderr[-2000:]


def test_api_errors(checkpoint, tmp_path):
    with pytest.raises(CheckpointMismatchError, match='does not belong'):
        init_model('configs/fsdv2/fsdv2lite_kitti_tiny.py', str(checkpoint))
    with pytest.raises(ValueError, match='device'):
        init_model(CONFIG, str(checkpoint), device='gpu0')
    model = init_model(CONFIG, str(checkpoint))
    with pytest.raises(FileNotFoundError, match='does not exist'):
        inference_detector(model, str(tmp_path / 'missing.bin'))
    with pytest.raises(ValueError, match=r'\(N, C >= 3\)'):
        inference_detector(model, np.zeros((10, 2), np.float32))
    with pytest.raises(ValueError, match='floating point'):
        inference_detector(model, np.zeros((10, 4), np.int64))
    with pytest.raises(TypeError, match='init_model'):
        inference_detector(torch.nn.Linear(1, 1), np.zeros((10, 4), np.float32))


def test_dropped_points_are_warned_once_and_totalled_over_frames(checkpoint, frame, mm_warnings):
    model = init_model(CONFIG, str(checkpoint))
    points, _ = frame_points(model, str(frame / 'velodyne' / '000025.bin'))
    far = points[:3].clone()
    far[:, 0] = 500.0  # outside point_cloud_range
    inference_detector(model, [torch.cat([points, far]), torch.cat([points, far[:2]])])
    warned = [m for m in mm_warnings if m.startswith('PointsRangeFilter')]
    assert len(warned) == 1
    range_filter = next(t for t in inference_pipeline(model) if type(t).__name__ == 'PointsRangeFilter')
    assert range_filter.dropped_totals['num_points_filtered'] >= 5


def test_predict_item_and_score_samples_on_a_real_frame(checkpoint, shared_data):
    model = init_model(CONFIG, str(checkpoint))
    cfg = Config.fromfile(str(REPO / CONFIG))
    dataset = DATASETS.build(dict(cfg.test_dataloader.dataset, data_root=str(shared_data / 'kitti_tiny_3d')))
    points, sample = predict_item(model, dataset, 0)
    assert points.shape[1] == 4 and 'pred_instances_3d' in sample
    assert sample.metainfo['lidar_path'].endswith('000025.bin')  # the first val frame
    # the frame's ground truth given as the predictions scores 100 % with KITTI's rules; shifted 2 m, 0 %
    gt = sample.gt_instances_3d
    assert int((gt.labels_3d == 0).sum()) > 0
    sample.pred_instances_3d = InstanceData(bboxes_3d=gt.bboxes_3d, labels_3d=gt.labels_3d,
                                            scores_3d=torch.ones(len(gt.labels_3d)))
    metrics = score_samples(cfg.test_evaluator, [sample], dataset.classes)
    assert metrics['Car_BEV_AP@0.7'] == pytest.approx(1.0)
    shifted = torch.as_tensor(gt.bboxes_3d).clone()
    shifted[:, 0] += 2.0
    sample.pred_instances_3d.bboxes_3d = shifted
    assert score_samples(cfg.test_evaluator, [sample], dataset.classes)['Car_BEV_AP@0.7'] == 0.0
