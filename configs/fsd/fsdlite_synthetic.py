# FSD-lite on synthetic ray-cast lidar scenes (the demo): train on CPU, then evaluate BEV / 3D AP (R40)
# on held-out frames.  python tools/train.py configs/fsd/fsdlite_synthetic.py
_base_ = ['../_base_/detection/synthetic_lidar_det.py', './fsdlite_model.py']

model = dict(point_range={{_base_.point_range}})

# the foreground warm-up of fsd_seg_stage.py, and a moving average of the weights from iteration 300 on (validation,
# checkpoints and the demo use the average): single trainings on this schedule differ a lot on real frames, and the
# average of the last iterations is steadier than the last iteration's weights
custom_hooks = [dict(type='FSDWarmupHook', enable_after_iter=200, threshold_buffer=0.2, buffer_iter=200),
                dict(type='EMAHook', momentum=0.002, begin_iter=300, update_buffers=True)]
