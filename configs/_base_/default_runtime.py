# Runtime shared by every fsdlite config (mmengine Runner).
default_scope = 'fsdlite'

default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=10),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=500, max_keep_ckpts=3, save_last=True),
    sampler_seed=dict(type='DistSamplerSeedHook'),
)

env_cfg = dict(
    cudnn_benchmark=False,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    dist_cfg=dict(backend='nccl'),  # tools/train.py switches to gloo when torch has no CUDA
)

log_processor = dict(type='LogProcessor', window_size=10, by_epoch=False)
log_level = 'INFO'
vis_backends = [dict(type='LocalVisBackend')]
visualizer = dict(type='Visualizer', vis_backends=vis_backends, name='visualizer')
randomness = dict(seed=0)
load_from = None
resume = False
