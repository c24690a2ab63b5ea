# FSDv2-lite trained on the simulated world (configs/fsdv2/fsdv2lite_synthetic.py), fine-tuned on the 25 real
# kitti_tiny_3d training frames and scored on its 5 val frames (configs/_base_/detection/kitti_tiny_det.py):
#   python tools/train.py configs/fsdv2/fsdv2lite_synthetic.py --work-dir work_dirs/fsdv2lite_synthetic
#   python tools/create_gt_database.py configs/fsdv2/fsdv2lite_kitti_tiny.py --out work_dirs/gt_db/kitti_tiny
#   python tools/train.py configs/fsdv2/fsdv2lite_kitti_tiny.py --work-dir work_dirs/fsdv2lite_kitti_tiny
_base_ = ['../_base_/detection/kitti_tiny_det.py', './fsdv2lite_model.py']

model = dict(point_range={{_base_.point_range}})
load_from = 'work_dirs/fsdv2lite_synthetic/iter_1000.pth'
custom_hooks = [dict(type='FSDWarmupHook', enable_after_iter=0, threshold_buffer=0.2, buffer_iter=0)]
