"""A trained detector on a user's own point clouds (the interface of mmdet3d's ``init_model`` / ``inference_detector``).

    model = init_model('configs/fsd/fsdlite_kitti_tiny.py', 'work_dirs/fsdlite_kitti_tiny/iter_600.pth')
    result = inference_detector(model, 'velodyne/000123.bin', lidar2img=lidar2img)
    result.pred_instances_3d.bboxes_3d, .scores_3d, .labels_3d

Points go through the config's test pipeline (range filters) and the model's data preprocessor, as in
``tools/test.py``. KITTI configs train on the points in the camera's view: pass the frame's ``lidar2img`` (from
its calib) so a full scan is cropped the same way.
"""
import copy
import os.path as osp

import numpy as np
import torch
from mmengine.config import Config
from mmengine.dataset import pseudo_collate

from ..datasets.lidar_det_dataset import build_pipeline
from ..datasets.transforms.loading import drop_non_finite, load_points
from ..engine.checkpoint import load_weights
from ..engine.errors import ToolError
from ..engine.tool_setup import read_config
from ..registry import MODELS
from ..structures.camera import KITTI_IMAGE_SIZE, camera_fov_mask


def _test_dataset_cfg(cfg):
    loader = cfg.get('test_dataloader') or cfg.get('val_dataloader')
    if not loader:
        raise ToolError('the config has no test_dataloader (or val_dataloader): its dataset gives the classes, the '
                        'point file layout and the test pipeline')
    ds = copy.deepcopy(loader['dataset'])
    while 'dataset' in ds:
        ds = ds['dataset']
    return ds


def init_model(config, checkpoint=None, device='cpu', cfg_options=None):
    """Build the model of a config and load a checkpoint into it strictly.

    Args:
        config (str | Config): config file or loaded config.
        checkpoint (str, optional): weights; a checkpoint of another config raises an error naming what differs.
        device (str): 'cpu', 'cuda', 'cuda:1', ...
        cfg_options (dict, optional): dotted overrides merged into the config.
    Returns:
        the model in eval mode on ``device``, with ``model.cfg`` and ``model.dataset_meta`` (``classes``).
    """
    cfg = config if isinstance(config, Config) else read_config(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    if 'model' not in cfg:
        raise ToolError(f'config {getattr(cfg, "filename", config)!r} has no model')
    model = MODELS.build(copy.deepcopy(cfg.model))
    if checkpoint is not None:
        load_weights(model, checkpoint, getattr(cfg, 'filename', None) or str(config))
    try:
        device = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"init_model: device={device!r} is not a device ({exc}); expected e.g. 'cpu' or 'cuda'") \
            from None
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'init_model: device={str(device)!r} but torch sees no CUDA device')
    ds = _test_dataset_cfg(cfg)
    model.cfg = cfg
    model.dataset_meta = dict(classes=tuple((ds.get('metainfo') or {}).get('classes', ('Car', 'Pedestrian',
                                                                                          'Cyclist'))))
    return model.to(device).eval()


def _points(pcd, load_dim, use_dim):
    if isinstance(pcd, (str, bytes)) or hasattr(pcd, '__fspath__'):
        path = str(pcd)
        if not osp.isfile(path):
            raise FileNotFoundError(f'inference_detector: point file {path!r} does not exist')
        return load_points(path, load_dim, use_dim), path
    if isinstance(pcd, np.ndarray):
        pcd = torch.from_numpy(np.ascontiguousarray(pcd))
    if not isinstance(pcd, torch.Tensor) or pcd.dim() != 2 or pcd.shape[1] < 3:
        raise ValueError(f'inference_detector: points must be a .bin path or an (N, C >= 3) array/tensor, got '
                         f'{type(pcd).__name__} {tuple(getattr(pcd, "shape", ()))}')
    if not pcd.is_floating_point():
        raise ValueError(f'inference_detector: points must be floating point, got {pcd.dtype}')
    return pcd.float().cpu(), None


def frame_points(model, pcd, lidar2img=None, image_size=KITTI_IMAGE_SIZE):
    """The points :func:`inference_detector` runs the model on: loaded, finite, cropped to the camera's view.

    Args: as :func:`inference_detector` (one point cloud).
    Returns:
        tuple: ``points`` (N, C) float32 tensor and ``info`` dict (``lidar_path``, ``num_points_invalid``,
        ``num_points_out_of_view``).
    """
    if not hasattr(model, 'cfg'):
        raise TypeError('inference_detector: the model needs .cfg (build it with fsdlite.apis.init_model)')
    ds = _test_dataset_cfg(model.cfg)
    load_dim = int(ds.get('load_dim', 4))
    points, path = _points(pcd, load_dim, ds.get('use_dim', load_dim))
    points, invalid = drop_non_finite(points)
    out_of_view = 0
    if lidar2img is not None:
        keep = torch.from_numpy(camera_fov_mask(points, lidar2img, image_size))
        out_of_view = int((~keep).sum())
        points = points[keep]
    return points, dict(lidar_path=path, num_points_invalid=invalid, num_points_out_of_view=out_of_view)


def inference_pipeline(model):
    """The transforms of the config's test pipeline (its ground-truth filters see no boxes here), built on the first
    call and kept on the model, so that what its filters drop is warned about once and totalled over
    every frame (``transform.dropped_totals``).

    Returns:
        list: the built transforms, in order.
    """
    pipeline = getattr(model, '_inference_pipeline', None)
    if pipeline is None:
        pipeline = build_pipeline(_test_dataset_cfg(model.cfg).get('pipeline', []))
        object.__setattr__(model, '_inference_pipeline', pipeline)  # a plain attribute, not a submodule
    return pipeline


def inference_detector(model, pcd, lidar2img=None, image_size=KITTI_IMAGE_SIZE):
    """Detect objects in one point cloud (or a list of them).

    Args:
        model: from :func:`init_model`.
        pcd (str | ndarray | Tensor | list): a ``.bin`` file (float32, as many values per point as the config's
            dataset ``load_dim``, default 4) or an (N, C) array of x, y, z, reflectance, ...; or a list of these.
        lidar2img (array, optional): (4, 4) ``P2 @ R0_rect @ Tr_velo_to_cam`` of the frame; the points outside the
            camera's view are dropped first (counted in ``metainfo['num_points_out_of_view']``), as the KITTI
            configs train. A list input takes one matrix for all or a list of them.
        image_size (tuple): (width, height) of the camera image.
    Returns:
        Det3DDataSample (a list for a list input): ``pred_instances_3d`` with ``bboxes_3d`` (M, 7) bottom-centre
        lidar boxes, ``scores_3d`` (M,) and ``labels_3d`` (M,) (indices into ``model.dataset_meta['classes']``).
    """
    if isinstance(pcd, (list, tuple)):
        matrices = lidar2img if isinstance(lidar2img, (list, tuple)) else [lidar2img] * len(pcd)
        if len(matrices) != len(pcd):
            raise ValueError(f'inference_detector: {len(pcd)} point clouds but {len(matrices)} lidar2img matrices')
        return [inference_detector(model, p, m, image_size) for p, m in zip(pcd, matrices)]
    points, info = frame_points(model, pcd, lidar2img, image_size)
    classes = model.dataset_meta['classes']
    results = dict(points=points, classes=classes, num_classes=len(classes), box_origin='bottom', sample_idx=0,
                   num_pts_feats=points.shape[1], gt_bboxes_3d=torch.zeros(0, 7),
                   gt_labels_3d=torch.zeros(0, dtype=torch.long), **info)
    if lidar2img is not None:
        results['lidar2img'] = np.asarray(lidar2img, dtype=np.float64)
    item = results
    for transform in inference_pipeline(model):
        item = transform(item)
    with torch.no_grad():
        return model.test_step(pseudo_collate([item]))[0]


__all__ = ['init_model', 'inference_detector', 'frame_points', 'inference_pipeline']
