# Synthetic primitive shapes (sphere, box, cylinder, cone, torus, plane) for classification:
# random proportions, random rotation about z (upright shapes, as ModelNet), scale 0.8-1.2, 1 cm jitter,
# 30 % one-sided partial views.  rotation='all' (any 3D pose) is a harder variant.
dataset_type = 'PointShapesDataset'
class_names = ('sphere', 'box', 'cylinder', 'cone', 'torus', 'plane')
shape_cfg = dict(rotation='z', num_points=(1024, 2048), scale=(0.8, 1.2), jitter=0.01, partial_prob=0.3)

train_dataloader = dict(
    batch_size=8, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(type=dataset_type, split='train', num_samples=1800, seed=0, **shape_cfg))
val_dataloader = dict(
    batch_size=8, num_workers=0, persistent_workers=False, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type=dataset_type, split='val', num_samples=300, seed=0, **shape_cfg))
test_dataloader = dict(
    batch_size=8, num_workers=0, persistent_workers=False, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type=dataset_type, split='test', num_samples=600, seed=0, **shape_cfg))
val_evaluator = dict(type='ClsMetric')
test_evaluator = val_evaluator
