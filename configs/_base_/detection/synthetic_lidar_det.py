# Detector training on the synthetic ray-cast lidar scenes (shared by FSD-lite and FSDv2-lite): data, metric
# (KITTI-style BEV / 3D AP, R40, on held-out frames) and a 1000-iteration AdamW + cosine schedule
# (the demo's: its training fits its 10 minutes on 2 cores).
# A detector config adds its model base and ``model = dict(point_range=point_range)``.
_base_ = [
    '../default_runtime.py',
    '../schedules/adamw_cosine_iter.py',
    '../datasets/synthetic_lidar.py',
]

point_range = [0, -40, -3, 70.4, 40, 1]  # = the dataset's point_cloud_range

train_dataloader = dict(
    batch_size=2, sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(num_frames=600, cache=True))
val_dataloader = dict(dataset=dict(num_frames=50, cache=True))
test_dataloader = val_dataloader
val_evaluator = dict(type='DetMetric', kitti_scoring=True,
                     iou_thresholds=dict(Car=(0.7, 0.5), Pedestrian=(0.5, 0.25), Cyclist=(0.5, 0.25)))
test_evaluator = val_evaluator

max_iters = 1000
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
optim_wrapper = dict(optimizer=dict(lr=2e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=400), logger=dict(interval=20))
