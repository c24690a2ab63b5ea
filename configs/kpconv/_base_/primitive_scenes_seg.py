# Synthetic multi-primitive scenes for segmentation: a 3 m x 3 m ground plane ('plane') with 3-6 primitives
# (sphere, box, cylinder, cone, torus) of 0.35-0.7 m standing on it; every point labelled by primitive
# (~10k points per scene).
dataset_type = 'PrimitiveScenesDataset'
scene_cfg = dict(extent=1.5, objects=(3, 6), point_density=600.0, object_scale=(0.35, 0.7), jitter=0.005)

train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(type=dataset_type, split='train', num_samples=400, seed=0, **scene_cfg))
val_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type=dataset_type, split='val', num_samples=40, seed=0, **scene_cfg))
test_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type=dataset_type, split='test', num_samples=80, seed=0, **scene_cfg))
val_evaluator = dict(type='SegMetric', with_background=False, ignore_index=None)
test_evaluator = val_evaluator
