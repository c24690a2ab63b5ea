# FSD-lite trained on the simulated world (configs/fsd/fsdlite_synthetic.py), fine-tuned on the 25 real
# kitti_tiny_3d training frames and scored on its 5 val frames (configs/_base_/detection/kitti_tiny_det.py):
#   python tools/train.py configs/fsd/fsdlite_synthetic.py --work-dir work_dirs/fsdlite_synthetic
#   python tools/create_gt_database.py configs/fsd/fsdlite_kitti_tiny.py --out work_dirs/gt_db/kitti_tiny
#   python tools/train.py configs/fsd/fsdlite_kitti_tiny.py --work-dir work_dirs/fsdlite_kitti_tiny
_base_ = ['../_base_/detection/kitti_tiny_det.py', './fsdlite_model.py']

model = dict(point_range={{_base_.point_range}})
load_from = 'work_dirs/fsdlite_synthetic/iter_1000.pth'
# the synthetic model's foreground is already trained: no top-k warm-up (the model base's hook)
custom_hooks = [dict(type='FSDWarmupHook', enable_after_iter=0, threshold_buffer=0.2, buffer_iter=0)]
