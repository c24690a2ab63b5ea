# FSD-lite model (shared by the synthetic and KITTI configs): segmentor + vote head (fsd_seg_stage.py), then
# foreground sampling -> class-wise grouping of voted centres -> SIR over each cluster -> one box per
# cluster -> rotated BEV NMS.
_base_ = ['./fsd_seg_stage.py']

model = dict(
    type='FSDLite',
    cluster_assigner=dict(type='ClusterAssigner',
                          cluster_voxel_size=((0.3, 0.3, 6.0), (0.15, 0.15, 6.0), (0.2, 0.2, 6.0)),
                          connected_dist=(0.6, 0.3, 0.4), min_points=2),
    sir=dict(type='SIR', block_channels=((64, 64), (64, 64), (64, 64)), rel_channels=(16,),
             xyz_normalizer=(20.0, 20.0, 4.0)),
    bbox_head=dict(
        type='ClusterHead', shared_channels=(256, 256), class_given=True,
        # orientation only (yaw modulo pi): front and back of a lidar box look alike, and IoU ignores it; the centre
        # offset along / across the line of sight, since a cluster's mean voted centre falls short of the box centre
        # on the side that faces the sensor
        box_coder=dict(type='PointBoxCoder', yaw_period=3.141592653589793, sensor_frame=True),
        loss_cls=dict(type='SigmoidFocalLoss', gamma=2.0, alpha=0.25, loss_weight=1.0),
        loss_bbox=dict(type='L1Loss', loss_weight=1.0), assign_margin=(0.5, 0.5),
        test_cfg=dict(score_thr=0.1, nms_iou_thr=0.25, pre_max=4096, post_max=100)),
    # second stage: the max_boxes highest-scoring boxes above the score threshold are re-estimated from the points
    # around them, each in its own frame
    refiner=dict(type='BoxRefiner', sir=dict(block_channels=((64, 64), (64, 64)), rel_channels=(16,)),
                 shared_channels=(128,), max_boxes=64))
