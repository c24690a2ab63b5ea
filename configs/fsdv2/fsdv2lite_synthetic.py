# FSDv2-lite on synthetic ray-cast lidar scenes: train on CPU, then evaluate BEV / 3D AP (R40) on held-out
# frames (data and metric: configs/_base_/detection/synthetic_lidar_det.py; a 1000-iteration schedule).
#   python tools/train.py configs/fsdv2/fsdv2lite_synthetic.py
_base_ = ['../_base_/detection/synthetic_lidar_det.py', './fsdv2lite_model.py']

model = dict(point_range={{_base_.point_range}})

max_iters = 1000
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
