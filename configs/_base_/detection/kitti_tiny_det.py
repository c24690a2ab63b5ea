# Fine-tuning a detector trained on the simulated world on the 25 real kitti_tiny_3d training frames, scored on the
# 5 val frames with KITTI's own rules (DetMetric kitti_scoring: difficulty levels, DontCare, neighbouring classes,
# interpolated R40). Shared by FSD-lite and FSDv2-lite; a detector config adds its model and load_from.
_base_ = [
    '../default_runtime.py',
    '../schedules/adamw_cosine_iter.py',
    '../datasets/kitti_tiny.py',
]

point_range = [0, -40, -3, 70.4, 40, 1]  # = the dataset's point_cloud_range

val_evaluator = dict(type='DetMetric', kitti_scoring=True,
                     iou_thresholds=dict(Car=(0.7, 0.5), Pedestrian=(0.5, 0.25), Cyclist=(0.5, 0.25)))
test_evaluator = val_evaluator

max_iters = 1000
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=max_iters), logger=dict(interval=20))
