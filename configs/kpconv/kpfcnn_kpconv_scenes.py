# KPFCNN (rigid KPConv) segmentation of synthetic primitive scenes; reports per-class IoU and mIoU.
#   python tools/train.py configs/kpconv/kpfcnn_kpconv_scenes.py
#   python tools/test.py configs/kpconv/kpfcnn_kpconv_scenes.py work_dirs/kpfcnn_kpconv_scenes/iter_800.pth
_base_ = ['_base_/schedule_cpu.py', '_base_/kpfcnn.py', '_base_/primitive_scenes_seg.py']
max_iters = 800
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=30),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=max_iters))
