# FSDv2-lite on synthetic ray-cast lidar scenes: train on CPU, then evaluate BEV / 3D AP (R40) on held-out
# frames (data and metric: configs/_base_/detection/synthetic_lidar_det.py, with its schedule).
#   python tools/train.py configs/fsdv2/fsdv2lite_synthetic.py
_base_ = ['../_base_/detection/synthetic_lidar_det.py', './fsdv2lite_model.py']

model = dict(point_range={{_base_.point_range}})
