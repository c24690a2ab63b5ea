# KPFCNN: 4-level kernel-point encoder, nearest-upsampling decoder with skip connections, per-point head.
# Level l: grid cell 0.08 * 2**l m, conv radius 2.5 cells, K = 15.  BatchNorm momentum 0.05 (PyTorch).
norm_cfg = dict(type='BN1d', momentum=0.05)
model = dict(
    type='KPFCNN',
    num_classes=6,
    backbone=dict(
        type='KPEncoder', in_channels=1,
        channels=(32, 64, 128, 256), blocks=(1, 2, 2, 2), conv_types=('KPConv',) * 4,
        first_subsampling_dl=0.08, conv_radius=2.5, stem='KPConv',
        conv_defaults=dict(kernel_size=15), norm_cfg=norm_cfg),
    decoder=dict(type='KPDecoder', norm_cfg=norm_cfg),
    head_channels=(32,),
    norm_cfg=norm_cfg,
    data_preprocessor=dict(type='KPDataPreprocessor', feature_mode='ones', max_neighbors=48))
