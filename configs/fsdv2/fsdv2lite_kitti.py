# FSDv2-lite on KITTI-format data (data, metric and schedule: configs/_base_/detection/kitti_det.py).
#   python tools/create_gt_database.py configs/fsdv2/fsdv2lite_kitti.py --out work_dirs/gt_db/kitti
#   python tools/train.py configs/fsdv2/fsdv2lite_kitti.py
_base_ = ['../_base_/detection/kitti_det.py', './fsdv2lite_model.py']

model = dict(point_range={{_base_.point_range}})
# KITTI-length warm-up: top-k foreground for the first 2000 iterations (the model base's hook, rescaled)
custom_hooks = [dict(type='FSDWarmupHook', enable_after_iter=2000, threshold_buffer=0.2, buffer_iter=2000)]
