# KITTI object-format data (KittiDataset): range [0, -40, -3, 70.4, 40, 1], classes Car / Pedestrian / Cyclist.
# By default a smoke set: the single real frame 000008 in ../shared/data (an mmdet3d v2 info .pkl, points
# cropped to the camera FOV).  For a full KITTI copy point data_root at it and use the standard layout:
#   data_root='data/kitti', ann_file='ImageSets/train.txt',
#   data_prefix=dict(pts='training/velodyne_reduced', label='training/label_2', calib='training/calib')
# (velodyne_reduced = points inside the camera FOV, as mmdet3d prepares them).
dataset_type = 'KittiDataset'
class_names = ('Car', 'Pedestrian', 'Cyclist')
metainfo = dict(classes=class_names)
point_cloud_range = [0, -40, -3, 70.4, 40, 1]
data_root = '../shared/data/kitti_object_000008'
train_ann_file = '000008.pkl'
val_ann_file = '000008.pkl'
data_prefix = dict(pts='')

# Ground-truth sampling: python tools/create_gt_database.py configs/_base_/datasets/kitti.py --out work_dirs/gt_db/kitti
gt_database = 'work_dirs/gt_db/kitti/gt_database.npz'
object_sample = dict(
    type='ObjectSample', db_path=gt_database,
    sample_groups=dict(Car=12, Pedestrian=6, Cyclist=6), min_points=dict(Car=5, Pedestrian=5, Cyclist=5), fill=True)

filtering = [
    dict(type='PointsRangeFilter', point_cloud_range=point_cloud_range),
    dict(type='ObjectRangeFilter', point_cloud_range=point_cloud_range),
]
train_pipeline = [
    dict(type='RandomFlip3D', flip_ratio_bev_horizontal=0.5),
    dict(type='GlobalRotScaleTrans', rot_range=[-0.7854, 0.7854], scale_ratio_range=[0.95, 1.05]),
    *filtering,
    dict(type='PointShuffle'),
    dict(type='Pack3DDetInputs'),
]
train_pipeline_gt_sample = [object_sample] + train_pipeline
test_pipeline = filtering + [dict(type='Pack3DDetInputs')]

train_dataloader = dict(
    batch_size=2,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type=dataset_type, data_root=data_root, ann_file=train_ann_file, data_prefix=data_prefix,
                 metainfo=metainfo, pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    drop_last=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type=dataset_type, data_root=data_root, ann_file=val_ann_file, data_prefix=data_prefix,
                 metainfo=metainfo, pipeline=test_pipeline, test_mode=True))
test_dataloader = val_dataloader
