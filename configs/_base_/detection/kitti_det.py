# Detector training on KITTI-format data (range [0, -40, -3, 70.4, 40, 1], Car / Pedestrian / Cyclist), shared
# by FSD-lite and FSDv2-lite. The dataset base points at the single real frame in ../shared/data (a smoke set);
# for a full KITTI copy set train_dataloader.dataset / val_dataloader.dataset (data_root, ann_file, data_prefix:
# see the dataset base) and, for ground-truth sampling, build the database and use train_pipeline_gt_sample.
_base_ = [
    '../default_runtime.py',
    '../schedules/adamw_cosine_iter.py',
    '../datasets/kitti.py',
]

point_range = [0, -40, -3, 70.4, 40, 1]  # = the dataset's point_cloud_range

train_dataloader = dict(batch_size=2, sampler=dict(type='InfiniteSampler', shuffle=True))
val_evaluator = dict(type='DetMetric', kitti_scoring=True,
                     iou_thresholds=dict(Car=(0.7, 0.5), Pedestrian=(0.5, 0.25), Cyclist=(0.5, 0.25)))
test_evaluator = val_evaluator

max_iters = 20000  # ~10 epochs of the 3,712-frame KITTI train split at batch size 2
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
optim_wrapper = dict(optimizer=dict(lr=2e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=200),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=2000), logger=dict(interval=50))
