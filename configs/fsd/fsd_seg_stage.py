# The first stage shared by FSD-lite and FSDv2-lite (a partial model, completed by fsdlite_model.py and
# ../fsdv2/fsdv2lite_model.py): the SparseSegmentor of configs/_base_/models/sparse_segmentor.py with a
# vote head, and the foreground sampler that feeds the instance stage.
_base_ = ['../_base_/models/sparse_segmentor.py']

model = dict(
    voxel_size=(0.25, 0.25, 0.25),
    backbone=dict(
        base_channels=16,
        encoder_channels=((16,), (32, 32), (64, 64)),
        decoder_channels=((64, 64, 32), (32, 32, 16), (16, 16, 16))),
    seg_head=dict(type='VoteSegHead', hidden_channels=(64, 64), loss_vote=dict(type='L1Loss', loss_weight=1.0)),
    # per class (Car, Pedestrian, Cyclist); budgets are per sample
    fg_sampler=dict(type='ForegroundSampler', score_thresholds=(0.3, 0.25, 0.25), max_per_class=(4096, 1024, 1024),
                    warmup_topk=(1024, 256, 256)))

# top-k foreground for the first iterations, then thresholds lowered by a buffer that decays
custom_hooks = [dict(type='FSDWarmupHook', enable_after_iter=200, threshold_buffer=0.2, buffer_iter=200)]
