# FSDv2-lite model (shared by the synthetic and KITTI configs): the FSD-lite first stage
# (../fsd/fsd_seg_stage.py), then voted centres of foreground points become virtual points, voxelized with
# the real points at 0.4 m and encoded by a dynamic VFE, mixed by a small sparse UNet (VirtualVoxelMixer);
# one box per virtual voxel -> rotated BEV NMS.  No connected components.
_base_ = ['../fsd/fsd_seg_stage.py']

model = dict(
    type='FSDv2Lite',
    virtual_encoder=dict(type='VirtualPointEncoder', out_channels=32),
    virtual_vfe=dict(type='DynamicVFE', feat_channels=(64, 64), voxel_size=(0.4, 0.4, 0.4)),
    mixer=dict(type='VirtualVoxelMixer', base_channels=32, encoder_channels=((32,), (64,), (64,)),
               decoder_channels=((64, 64, 64), (64, 64, 32), (32, 32, 64))),
    bbox_head=dict(
        type='ClusterHead', shared_channels=(128, 128), class_given=False,
        box_coder=dict(type='PointBoxCoder', yaw_period=3.141592653589793),
        loss_cls=dict(type='SigmoidFocalLoss', gamma=2.0, alpha=0.25, loss_weight=1.0),
        loss_bbox=dict(type='L1Loss', loss_weight=1.0), assign_margin=(0.25, 0.5),
        test_cfg=dict(score_thr=0.1, nms_iou_thr=0.25, pre_max=4096, post_max=100)))
