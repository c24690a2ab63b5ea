# The 30 real KITTI object frames in ../shared/data/kitti_tiny_3d (full HDL-64E scans, official labels and calib;
# train 000000-000024, val 000025-000029 as in its ImageSets). Points are cropped to the left colour camera's view
# (camera_fov=True, mmdet3d's velodyne_reduced): KITTI labels only what that camera sees.
# For your own KITTI copy: data_root='data/kitti', data_prefix=dict(pts='training/velodyne', label='training/label_2',
# calib='training/calib'), ann_file='ImageSets/train.txt' / 'ImageSets/val.txt'.
dataset_type = 'KittiDataset'
class_names = ('Car', 'Pedestrian', 'Cyclist')
metainfo = dict(classes=class_names)
point_cloud_range = [0, -40, -3, 70.4, 40, 1]
data_root = '../shared/data/kitti_tiny_3d'
data_prefix = dict(pts='velodyne', label='label_2', calib='calib')
train_ann_file = 'ImageSets/train.txt'
val_ann_file = 'ImageSets/val.txt'

# Ground-truth sampling from the 25 training frames, built once with
#   python tools/create_gt_database.py configs/fsd/fsdlite_kitti_tiny.py --out work_dirs/gt_db/kitti_tiny
gt_database = 'work_dirs/gt_db/kitti_tiny/gt_database.npz'
object_sample = dict(
    type='ObjectSample', db_path=gt_database,
    sample_groups=dict(Car=10, Pedestrian=4, Cyclist=4), min_points=dict(Car=5, Pedestrian=5, Cyclist=5), fill=True)

filtering = [
    dict(type='PointsRangeFilter', point_cloud_range=point_cloud_range),
    dict(type='ObjectRangeFilter', point_cloud_range=point_cloud_range),
]
train_pipeline = [
    object_sample,
    dict(type='RandomFlip3D', flip_ratio_bev_horizontal=0.5),
    dict(type='GlobalRotScaleTrans', rot_range=[-0.3927, 0.3927], scale_ratio_range=[0.95, 1.05]),
    *filtering,
    dict(type='ObjectMinPointsFilter', min_points=5),
    dict(type='PointShuffle'),
    dict(type='Pack3DDetInputs'),
]
test_pipeline = filtering + [dict(type='Pack3DDetInputs')]

kitti = dict(type=dataset_type, data_root=data_root, data_prefix=data_prefix, metainfo=metainfo, camera_fov=True)
train_dataloader = dict(
    batch_size=2,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(kitti, ann_file=train_ann_file, pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(kitti, ann_file=val_ann_file, pipeline=test_pipeline, test_mode=True))
test_dataloader = val_dataloader
