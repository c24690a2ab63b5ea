# Synthetic lidar scenes (SyntheticLidarDataset): a KITTI-like spinning lidar ray-cast against ground,
# Car / Pedestrian / Cyclist boxes and un-annotated clutter, cropped to the front 90 deg as KITTI's
# camera FOV.  Defaults keep frames CPU-friendly: 32 beams at 0.2 deg -> ~12k points per frame.
# For 64 beams: lidar.update(num_beams=64, azimuth_resolution=0.16) (~30k points per frame).
dataset_type = 'SyntheticLidarDataset'
class_names = ('Car', 'Pedestrian', 'Cyclist')
metainfo = dict(classes=class_names)
point_cloud_range = [0, -40, -3, 70.4, 40, 1]

lidar = dict(
    num_beams=32,
    vertical_fov='kitti',           # (-24.8, +2.0) deg; 'symmetric25' for +-25 deg, or a (low, high) pair
    azimuth_resolution=0.2,         # deg
    horizontal_fov=(-45.0, 45.0),   # front camera crop; (-180, 180) for a full sweep
    sensor_height=1.73,
    max_range=80.0)
noise = dict(range_noise=0.02, dropout=0.05, intensity_noise=0.03)
scene = dict()                      # SceneSpec overrides, e.g. dict(counts=dict(Car=(5, 15)))

# Ground-truth sampling database, built once with
#   python tools/create_gt_database.py configs/_base_/datasets/synthetic_lidar.py --out work_dirs/gt_db/synthetic
# and used by swapping train_pipeline for train_pipeline_gt_sample.
gt_database = 'work_dirs/gt_db/synthetic/gt_database.npz'
object_sample = dict(
    type='ObjectSample', db_path=gt_database,
    sample_groups=dict(Car=4, Pedestrian=3, Cyclist=3), min_points=dict(Car=10, Pedestrian=5, Cyclist=5))

augmentation = [
    dict(type='RandomFlip3D', flip_ratio_bev_horizontal=0.5),
    dict(type='GlobalRotScaleTrans', rot_range=[-0.3927, 0.3927], scale_ratio_range=[0.95, 1.05],
         translation_std=[0.0, 0.0, 0.0]),
]
filtering = [
    dict(type='PointsRangeFilter', point_cloud_range=point_cloud_range),
    dict(type='ObjectRangeFilter', point_cloud_range=point_cloud_range),
    dict(type='ObjectMinPointsFilter', min_points=5),   # unobservable objects are not targets
]
train_pipeline = augmentation + filtering + [dict(type='PointShuffle'), dict(type='Pack3DDetInputs')]
train_pipeline_gt_sample = [object_sample] + train_pipeline
test_pipeline = filtering + [dict(type='Pack3DDetInputs')]

# cache=True keeps each rendered frame in memory (~0.4 MB per frame: ~150 MB for the 400 training frames): a frame
# takes ~14 ms to ray-cast and ~2 ms to run through the pipeline, and training reads every frame many times.
train_dataloader = dict(
    batch_size=2,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type=dataset_type, split='train', num_frames=400, seed=0, lidar=lidar, noise=noise, scene=scene,
                 metainfo=metainfo, pipeline=train_pipeline, cache=True))
val_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type=dataset_type, split='val', num_frames=50, seed=0, lidar=lidar, noise=noise, scene=scene,
                 metainfo=metainfo, pipeline=test_pipeline, test_mode=True, cache=True))
test_dataloader = val_dataloader
