# KPCNN: 4-level kernel-point encoder (KPConv stem) -> global average -> MLP head.
# Level l: grid cell 0.06 * 2**l, conv radius 2.5 cells, K = 15 kernel points.
# BatchNorm momentum is PyTorch's (weight of the new batch): 0.05.
norm_cfg = dict(type='BN1d', momentum=0.05)
model = dict(
    type='KPCNN',
    num_classes=6,
    backbone=dict(
        type='KPEncoder', in_channels=1,
        channels=(32, 64, 128, 256), blocks=(1, 2, 2, 2), conv_types=('KPConv',) * 4,
        first_subsampling_dl=0.06, conv_radius=2.5, stem='KPConv',
        conv_defaults=dict(kernel_size=15), norm_cfg=norm_cfg),
    head_channels=(128,),
    norm_cfg=norm_cfg,
    data_preprocessor=dict(type='KPDataPreprocessor', feature_mode='ones', max_neighbors=48))
