# FSD-lite on KITTI-format data (range [0, -40, -3, 70.4, 40, 1], Car / Pedestrian / Cyclist).
# The dataset base points at the single real frame in ../shared/data (a smoke set); for a full KITTI copy set
# train_dataloader.dataset / val_dataloader.dataset (data_root, ann_file, data_prefix: see the base) and, for
# ground-truth sampling, build the database and use train_pipeline_gt_sample:
#   python tools/create_gt_database.py configs/fsd/fsdlite_kitti.py --out work_dirs/gt_db/kitti
#   python tools/train.py configs/fsd/fsdlite_kitti.py
_base_ = [
    '../_base_/default_runtime.py',
    '../_base_/schedules/adamw_cosine_iter.py',
    '../_base_/datasets/kitti.py',
    './fsdlite_model.py',
]

point_range = [0, -40, -3, 70.4, 40, 1]  # = the dataset's point_cloud_range
model = dict(point_range=point_range)

train_dataloader = dict(batch_size=2, sampler=dict(type='InfiniteSampler', shuffle=True))
val_evaluator = dict(type='DetMetric', iou_thresholds=dict(Car=(0.7, 0.5), Pedestrian=(0.5, 0.25),
                                                           Cyclist=(0.5, 0.25)))
test_evaluator = val_evaluator

max_iters = 20000  # ~10 epochs of the 3,712-frame KITTI train split at batch size 2
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
optim_wrapper = dict(optimizer=dict(lr=2e-3))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=200),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
custom_hooks = [dict(type='FSDWarmupHook', enable_after_iter=2000, threshold_buffer=0.2, buffer_iter=2000)]
default_hooks = dict(checkpoint=dict(interval=2000), logger=dict(interval=50))
