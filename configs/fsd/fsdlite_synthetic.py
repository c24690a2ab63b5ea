# FSD-lite on synthetic ray-cast lidar scenes (the demo): train on CPU, then evaluate BEV / 3D AP (R40)
# on held-out frames.  python tools/train.py configs/fsd/fsdlite_synthetic.py
_base_ = ['../_base_/detection/synthetic_lidar_det.py', './fsdlite_model.py']

model = dict(point_range={{_base_.point_range}})

# No moving average of the weights (EMAHook): its horizon would be a large part of so short a run and would mix in
# the half-trained weights of its middle (boxes turned and sized worse); the cosine decay already holds the last
# iterations' weights nearly still.
