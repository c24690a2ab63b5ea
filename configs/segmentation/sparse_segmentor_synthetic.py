# SparseSegmentor on synthetic ray-cast lidar scenes (Car / Pedestrian / Cyclist + background).
# Sized for a 2-core CPU: 0.4 m voxels, a 4-stage UNet of <= 64 channels, cached training frames.
_base_ = [
    '../_base_/default_runtime.py',
    '../_base_/schedules/adamw_cosine_iter.py',
    '../_base_/models/sparse_segmentor.py',
]

classes = ('Car', 'Pedestrian', 'Cyclist')
point_range = (0.0, -40.0, -3.0, 70.4, 40.0, 1.0)

model = dict(
    voxel_size=(0.4, 0.4, 0.4),
    point_range=point_range,
    backbone=dict(
        base_channels=16,
        encoder_channels=((16,), (32, 32), (32, 32), (64,)),
        decoder_channels=((64, 64, 32), (32, 32, 32), (32, 32, 16), (16, 16, 16))),
    seg_head=dict(num_classes=len(classes), hidden_channels=(64, 64)))

train_pipeline = [
    dict(type='RandomFlip3D', flip_ratio_bev_horizontal=0.5),
    dict(type='GlobalRotScaleTrans', rot_range=(-0.2, 0.2), scale_ratio_range=(0.95, 1.05)),
    dict(type='PointShuffle'),
    dict(type='Pack3DDetInputs'),
]
test_pipeline = [dict(type='Pack3DDetInputs')]


synthetic = dict(type='SyntheticLidarDataset', seed=0, cache=True, metainfo=dict(classes=classes))
train_dataloader = dict(
    batch_size=2, num_workers=0, sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(synthetic, split='train', num_frames=64, pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=2, num_workers=0, sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(synthetic, split='val', num_frames=16, pipeline=test_pipeline, test_mode=True))
test_dataloader = dict(val_dataloader, dataset=dict(synthetic, split='test', num_frames=24, pipeline=test_pipeline,
                                                    test_mode=True))
val_evaluator = dict(type='SegMetric')
test_evaluator = val_evaluator

max_iters = 600
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=30),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=200))
