# FSD-lite on synthetic ray-cast lidar scenes (the demo): train on CPU, then evaluate BEV / 3D AP (R40)
# on held-out frames.  python tools/train.py configs/fsd/fsdlite_synthetic.py
_base_ = ['../_base_/detection/synthetic_lidar_det.py', './fsdlite_model.py']

model = dict(point_range={{_base_.point_range}})
