# KPCNN with KPConvX (KPConvD at level 0, then depthwise kernels modulated by sigmoid kernel attention).
#   python tools/train.py configs/kpconv/kpcnn_kpconvx_shapes.py
_base_ = ['_base_/schedule_cpu.py', '_base_/kpcnn.py', '_base_/point_shapes_cls.py']
kpconvd = dict(type='KPConvD', aggregation='nearest')
kpconvx = dict(type='KPConvX', aggregation='nearest', channels_per_group=8, weight_norm=False)
model = dict(backbone=dict(conv_types=(kpconvd, kpconvx, kpconvx, kpconvx)))
