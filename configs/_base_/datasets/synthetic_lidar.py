# Simulated KITTI frames (SyntheticLidarDataset, fsdlite/datasets/sim): urban streets -- roads, curbs, sidewalks,
# facades, walls, fences, trees, bushes, poles, parked and moving traffic, pedestrians, cyclists, vans, trucks and
# trams -- ray-cast by KITTI's HDL-64E (64 beams, 0.18 deg azimuth step, 1.73 m high), cropped to the camera's view
# (~16k points per frame) and labelled as KITTI labels real frames (2D boxes, truncation, occlusion).
dataset_type = 'SyntheticLidarDataset'
class_names = ('Car', 'Pedestrian', 'Cyclist')
metainfo = dict(classes=class_names)
point_cloud_range = [0, -40, -3, 70.4, 40, 1]

lidar = dict(
    num_beams=64,                   # fewer keeps an evenly spaced subset of the HDL-64E's lasers
    vertical_fov='kitti',           # the HDL-64E's own layout; or a (low, high) pair for uniform beams
    azimuth_resolution=0.18,        # deg
    sensor_height=1.73,
    camera_fov=True)                # crop to KITTI's left colour camera (velodyne_reduced)
noise = dict()                      # SensorNoise overrides (range noise, ray drop, reflectance model)
scene = dict()                      # WorldSpec overrides, e.g. dict(street_types=dict(urban=1.0))

# Ground-truth sampling database, built once with
#   python tools/create_gt_database.py configs/_base_/datasets/synthetic_lidar.py --out work_dirs/gt_db/synthetic
# and used by swapping train_pipeline for train_pipeline_gt_sample.
gt_database = 'work_dirs/gt_db/synthetic/gt_database.npz'
object_sample = dict(
    type='ObjectSample', db_path=gt_database,
    sample_groups=dict(Car=4, Pedestrian=3, Cyclist=3), min_points=dict(Car=10, Pedestrian=5, Cyclist=5))

# Shifts of the whole scene (z too: a real sensor sits at another height above another slope) make the model
# rely on shapes, not on absolute heights.
augmentation = [
    dict(type='RandomFlip3D', flip_ratio_bev_horizontal=0.5),
    dict(type='GlobalRotScaleTrans', rot_range=[-0.3927, 0.3927], scale_ratio_range=[0.95, 1.05],
         translation_std=[0.2, 0.2, 0.1]),
]
filtering = [
    dict(type='PointsRangeFilter', point_cloud_range=point_cloud_range),
    dict(type='ObjectRangeFilter', point_cloud_range=point_cloud_range),
]
# Objects with a handful of points are not training targets (their points become background): learned as
# positives they teach the model to call any small cluster of stray points a car.
train_pipeline = augmentation + filtering + [dict(type='ObjectMinPointsFilter', min_points=15),
                                             dict(type='PointShuffle'), dict(type='Pack3DDetInputs')]
train_pipeline_gt_sample = [object_sample] + train_pipeline
test_pipeline = filtering + [dict(type='ObjectMinPointsFilter', min_points=5), dict(type='Pack3DDetInputs')]

# cache=True keeps each rendered frame in memory (~0.5 MB per frame): training reads every frame many times and a
# frame takes far longer to simulate than to run through the pipeline.
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
