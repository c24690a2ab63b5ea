# SparseSegmentor (FSD-lite's first stage): voxelize -> DynamicVFE -> SparseUNet -> Voxel2PointNeck ->
# PointSegHead.  The grid is stated once (model.voxel_size / point_range) and each part's in_channels
# defaults to the previous part's out_channels, so derived configs only touch what they change.
model = dict(
    type='SparseSegmentor',
    voxel_size=(0.25, 0.25, 0.25),
    point_range=(0.0, -40.0, -3.0, 70.4, 40.0, 1.0),
    data_preprocessor=dict(type='LidarDataPreprocessor', num_point_features=4),
    voxel_encoder=dict(type='DynamicVFE', in_channels=4, feat_channels=(32, 32)),
    backbone=dict(
        type='SparseUNet',
        base_channels=16,
        encoder_channels=((16,), (32, 32), (64, 64), (64, 64)),
        decoder_channels=((64, 64, 64), (64, 64, 32), (32, 32, 16), (16, 16, 16))),
    neck=dict(type='Voxel2PointNeck'),
    seg_head=dict(
        type='PointSegHead',
        num_classes=3,
        hidden_channels=(64, 64),
        loss_seg=dict(type='SigmoidFocalLoss', gamma=3.0, alpha=0.8, loss_weight=1.0),
        score_thr=0.5))
