# KPFCNN on the S3DIS Area 5 conferenceRoom_1 subset (shared/data/s3dis_area5_conf1): a smoke training on
# random regions (1.2 m radius) of the room, then inference over the whole room cut into 2 m tiles (every point is
# predicted once; mIoU over the 13 S3DIS classes).  The room is both the training and the test data, so
# the mIoU measures fitting, not generalisation.  Inputs: xyz + rgb, features = [1, r, g, b].
#   python tools/train.py configs/kpconv/kpfcnn_s3dis.py
#   python tools/test.py configs/kpconv/kpfcnn_s3dis.py work_dirs/kpfcnn_s3dis/iter_800.pth
_base_ = ['_base_/schedule_cpu.py', '_base_/kpfcnn.py']
room = '../shared/data/s3dis_area5_conf1/area5_conferenceRoom_1_subset.npz'
class_names = ('ceiling', 'floor', 'wall', 'beam', 'column', 'window', 'door', 'table', 'chair', 'sofa',
               'bookcase', 'board', 'clutter')
model = dict(
    num_classes=13,
    backbone=dict(in_channels=4, first_subsampling_dl=0.08),
    data_preprocessor=dict(feature_mode='ones+points'))
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(type='S3DISRoomDataset', path=room, mode='train', num_samples=400, sphere_radius=1.2,
                 max_points=40000, seed=0))
val_dataloader = dict(
    batch_size=1, num_workers=0, persistent_workers=False, drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='S3DISRoomDataset', path=room, mode='test', tile_size=2.0))
test_dataloader = val_dataloader
val_evaluator = dict(type='SegMetric', classes=class_names, with_background=False, ignore_index=None)
test_evaluator = val_evaluator
max_iters = 800
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=30),
    dict(type='CosineAnnealingLR', T_max=max_iters, eta_min=1e-5, by_epoch=False, begin=0, end=max_iters),
]
default_hooks = dict(checkpoint=dict(interval=max_iters))
