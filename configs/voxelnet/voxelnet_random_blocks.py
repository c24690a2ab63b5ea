# VoxelNet on simulated random-block volumes (4x4x3 voxels of 0.2 m, 500 muons each; X0Net sizes);
# each voxel sees the 40 muons whose PoCA is nearest to it (muons_per_voxel).
# Sized for a CPU (training time and results: docs/benchmarks.md).
# Held-out volumes use another seed; the metric reports the model next to the PoCA log-scattering
# baseline on the same volumes.
# Why these sizes: the cost of the muon stage grows with V x M, the signal with the muons per voxel
# (M / V); 4x4x3 with 500 muons has ~10 PoCAs per voxel, and the 40 nearest muons per voxel (not all
# 500) let the model learn localisation as well as the background material.
# Both standardisers use running statistics in training too (train_stats='running'): a batch holds one or
# two volumes, whose batch statistics would subtract exactly the per-volume level (the material).
_base_ = ['../_base_/default_runtime.py', '../_base_/schedules/adamw_cosine_iter.py']

classes = ('beryllium', 'carbon', 'silicon', 'iron', 'lead')
grid_shape = (4, 4, 3)
voxel_size = 0.2
num_muons = 500
muons_per_voxel = 40


def stage(in_channels, k):
    return dict(type='GraphStage',
                gravnet=dict(type='GravNetLayer', in_channels=in_channels, latent_dims=4, message_dims=22,
                             hidden_channels=(52, 52), out_channels=48, k=k, distance_scale=10.0),
                collapse=dict(type='AttentionCollapse', attn_channels=12, out_channels=40))


model = dict(
    type='VoxelNet',
    impl='efficient',            # 'dense' = the O(V M^2) reference with the same weights
    chunk_rows=1 << 20,          # voxels x muons per chunk
    recompute=False,             # small volumes: no need to trade time for memory here
    position_scale=1 / voxel_size,
    data_preprocessor=dict(type='VoxelNetDataPreprocessor'),
    # log of the angles, displacements, X0 estimate and PoCA distance (near muons get resolved values)
    input_norm=dict(type='FeatureStandardizer', num_features=9, log_features=(0, 1, 2, 3, 4, 8),
                    train_stats='running', momentum=None),
    voxel_norm=dict(train_stats='running', momentum=0.05),   # the muon stage's output drifts while training
    muon_stage=stage(9, k=25),
    voxel_stage=stage(80 + 4, k=12),
    head=dict(type='VoxelClassHead', num_classes=len(classes), attn_channels=20))

volumes = dict(type='MuonVolumeDataset', grid_shape=grid_shape, voxel_size=voxel_size, num_muons=num_muons,
               muons_per_voxel=muons_per_voxel, classes=classes)
train_dataloader = dict(batch_size=4, num_workers=0, sampler=dict(type='InfiniteSampler', shuffle=True),
                        dataset=dict(volumes, num_volumes=24000, seed=0))
val_dataloader = dict(batch_size=8, num_workers=0, sampler=dict(type='DefaultSampler', shuffle=False),
                      dataset=dict(volumes, num_volumes=96, seed=1))
test_dataloader = dict(val_dataloader, dataset=dict(volumes, num_volumes=96, seed=2))
val_evaluator = dict(type='VoxelMaterialMetric')
test_evaluator = val_evaluator

max_iters = 6000
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters // 4)
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=2e-3, weight_decay=1e-4), clip_grad=dict(max_norm=5.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.05, by_epoch=False, begin=0, end=30),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=2e-5, by_epoch=False, begin=0, end=max_iters),
]
default_hooks = dict(logger=dict(interval=50), checkpoint=dict(interval=max_iters))
