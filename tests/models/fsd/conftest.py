"""Fixtures for the FSD tests: hand-made lidar-like scenes and tiny detector configs."""
import math

import pytest
import torch

from fsdlite.structures import Det3DDataSample, InstanceData, PointData

RANGE = [0.0, -10.0, -3.0, 20.0, 10.0, 1.0]
VOXEL = [0.25, 0.25, 0.25]
CLASSES = ('Car', 'Pedestrian', 'Cyclist')
SIZES = {0: (3.9, 1.6, 1.5), 1: (0.8, 0.6, 1.7), 2: (1.8, 0.6, 1.7)}


def make_scene(seed, num_objects=3, ground_points=600, points_per_m2=60, classes=(0, 1, 2)):
    """One scene: points on the visible faces of a few boxes standing on a ground plane at z = -1.7.

    Returns a dict(inputs=dict(points (N, 4)), data_samples=Det3DDataSample) as the datasets produce.
    """
    g = torch.Generator().manual_seed(seed)
    boxes, labels, clouds = [], [], []
    placed = []
    for i in range(num_objects):
        label = classes[i % len(classes)]
        l, w, h = SIZES[label]
        for _ in range(50):
            x = float(torch.rand(1, generator=g)) * 14 + 3
            y = float(torch.rand(1, generator=g)) * 14 - 7
            if all(math.hypot(x - px, y - py) > 5 for px, py in placed):
                break
        placed.append((x, y))
        yaw = float(torch.rand(1, generator=g)) * math.pi - math.pi / 2
        box = torch.tensor([x, y, -1.7, l, w, h, yaw])
        # surface samples on the four side faces and the top
        n = max(int(points_per_m2 * (2 * (l + w) * h + l * w) / 4), 30)
        u = torch.rand(n, 3, generator=g) - 0.5
        face = torch.randint(0, 5, (n,), generator=g)
        local = u * torch.tensor([l, w, h]) + torch.tensor([0, 0, h / 2])
        local[face == 0, 0] = l / 2 * 0.98
        local[face == 1, 0] = -l / 2 * 0.98
        local[face == 2, 1] = w / 2 * 0.98
        local[face == 3, 1] = -w / 2 * 0.98
        local[face == 4, 2] = h * 0.99
        c, s = math.cos(yaw), math.sin(yaw)
        world = torch.stack([local[:, 0] * c - local[:, 1] * s + x, local[:, 0] * s + local[:, 1] * c + y,
                             local[:, 2] - 1.7], 1)
        clouds.append(torch.cat([world, torch.rand(n, 1, generator=g)], 1))
        boxes.append(box)
        labels.append(label)
    ground = torch.rand(ground_points, 4, generator=g)
    ground[:, 0] = ground[:, 0] * 19.5 + 0.2
    ground[:, 1] = ground[:, 1] * 19 - 9.5
    ground[:, 2] = -1.75 + 0.02 * torch.randn(ground_points, generator=g)
    points = torch.cat(clouds + [ground])
    sample = Det3DDataSample(metainfo=dict(sample_idx=seed, num_points_in_gt=[c.shape[0] for c in clouds]))
    sample.gt_instances_3d = InstanceData(bboxes_3d=torch.stack(boxes) if boxes else torch.zeros(0, 7),
                                          labels_3d=torch.tensor(labels, dtype=torch.int64))
    mask = torch.cat([torch.full((c.shape[0],), lab) for c, lab in zip(clouds, labels)] +
                     [torch.full((ground_points,), len(CLASSES))])
    sample.gt_pts_seg = PointData(pts_semantic_mask=mask)
    return dict(inputs=dict(points=points), data_samples=sample)


def collate(items):
    """pseudo_collate for the scene dicts."""
    return dict(inputs=dict(points=[it['inputs']['points'] for it in items]),
                data_samples=[it['data_samples'] for it in items])


def segmentor_parts():
    """Tiny segmentor components (VFE -> UNet -> neck -> VoteSegHead) + foreground sampler."""
    return dict(
        voxel_size=VOXEL, point_range=RANGE,
        data_preprocessor=dict(type='LidarDataPreprocessor'),
        voxel_encoder=dict(type='DynamicVFE', in_channels=4, feat_channels=(16, 16)),
        backbone=dict(type='SparseUNet', base_channels=16, encoder_channels=((16,), (32,)),
                      decoder_channels=((32, 32, 16), (16, 16, 16))),
        neck=dict(type='Voxel2PointNeck'),
        seg_head=dict(type='VoteSegHead', num_classes=3, hidden_channels=(32,),
                      loss_seg=dict(type='SigmoidFocalLoss', gamma=2.0, alpha=0.8)),
        fg_sampler=dict(type='ForegroundSampler', score_thresholds=0.3, max_per_class=512, warmup_topk=64))


def fsd_config():
    """A tiny FSD-lite model config."""
    return dict(type='FSDLite', **segmentor_parts(),
                cluster_assigner=dict(type='ClusterAssigner', cluster_voxel_size=(0.3, 0.1, 0.2),
                                      connected_dist=(0.6, 0.2, 0.4), min_points=1),
                sir=dict(type='SIR', block_channels=((16, 16), (16, 16)), rel_channels=(8,)),
                bbox_head=dict(type='ClusterHead', shared_channels=(32,), test_cfg=dict(score_thr=0.0)))


def fsdv2_config():
    """A tiny FSDv2-lite model config."""
    return dict(type='FSDv2Lite', **segmentor_parts(),
                virtual_encoder=dict(type='VirtualPointEncoder', out_channels=16),
                virtual_vfe=dict(type='DynamicVFE', feat_channels=(16, 16), voxel_size=[0.5, 0.5, 0.5]),
                mixer=dict(type='VirtualVoxelMixer', base_channels=16, encoder_channels=((16,), (16,)),
                           decoder_channels=((16, 16, 16), (16, 16, 16))),
                bbox_head=dict(type='ClusterHead', shared_channels=(32,), class_given=False,
                               test_cfg=dict(score_thr=0.0)))


def randomize_bn(module, seed=0):
    """Random BatchNorm1d running statistics (mean in [-0.2, 0.2), var in [0.5, 1.5)) so eval-mode norms are not
    identities; returns ``module``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=g) * 0.4 - 0.2)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
    return module


class FsdKit:
    """Helpers handed to tests (pytest's importlib mode forbids importing conftest)."""

    make_scene = staticmethod(make_scene)
    segmentor_parts = staticmethod(segmentor_parts)
    collate = staticmethod(collate)
    fsd_config = staticmethod(fsd_config)
    fsdv2_config = staticmethod(fsdv2_config)
    randomize_bn = staticmethod(randomize_bn)
    RANGE = RANGE


@pytest.fixture(scope='session')
def kit():
    """Scene maker, collate and tiny model configs (see :class:`FsdKit`)."""
    return FsdKit
