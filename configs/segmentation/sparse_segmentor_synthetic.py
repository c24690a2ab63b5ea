# SparseSegmentor on synthetic ray-cast lidar scenes (Car / Pedestrian / Cyclist + background).
# Sized for a 2-core CPU: 0.3 m (xy) voxels, a 4-stage UNet of <= 64 channels, cached frames.
#   python tools/train.py configs/segmentation/sparse_segmentor_synthetic.py
_base_ = [
    '../_base_/default_runtime.py',
    '../_base_/schedules/adamw_cosine_iter.py',
    '../_base_/models/sparse_segmentor.py',
    '../_base_/datasets/synthetic_lidar.py',
]

model = dict(
    voxel_size=(0.3, 0.3, 0.25),  # 0.25 m in z: 16 cells cover z in [-3, 1] exactly
    point_range=(0.0, -40.0, -3.0, 70.4, 40.0, 1.0),  # = the dataset's point_cloud_range
    backbone=dict(
        base_channels=16,
        encoder_channels=((16,), (32, 32), (32, 32), (64,)),
        decoder_channels=((64, 64, 32), (32, 32, 32), (32, 32, 16), (16, 16, 16))),
    seg_head=dict(num_classes=3, hidden_channels=(64, 64)))

train_dataloader = dict(sampler=dict(type='InfiniteSampler', shuffle=True),
                        dataset=dict(num_frames=120, cache=True))
val_dataloader = dict(batch_size=2, dataset=dict(num_frames=24, cache=True))
test_dataloader = val_dataloader
val_evaluator = dict(type='SegMetric')
test_evaluator = val_evaluator

max_iters = 500
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=30),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=200))
