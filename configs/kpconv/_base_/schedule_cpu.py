# Runtime + AdamW, linear warm-up then cosine decay, evaluation at the end (CPU-sized: ~1000 iterations).
_base_ = ['../../_base_/default_runtime.py', '../../_base_/schedules/adamw_cosine_iter.py']
max_iters = 1000
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=500)
optim_wrapper = dict(optimizer=dict(lr=2e-3, weight_decay=1e-4))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=50),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=500), logger=dict(interval=20))
