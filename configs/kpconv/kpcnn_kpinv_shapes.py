# KPCNN with kernel-point involution (the fixed design): BatchNorm momentum 0.05 (PyTorch semantics),
# no norm inside the weight generator, GroupNorm over each kernel point's generated weights + sigmoid,
# nearest-kernel-point assignment.  The stem stays a KPConv (it maps the 1 input feature to 32).
#   python tools/train.py configs/kpconv/kpcnn_kpinv_shapes.py
_base_ = ['_base_/schedule_cpu.py', '_base_/kpcnn.py', '_base_/point_shapes_cls.py']
kpinv = dict(type='KPInv', aggregation='nearest', channels_per_group=8, reduction=1, generator_norm=None,
             weight_norm=True, weight_act='sigmoid')
model = dict(backbone=dict(conv_types=(kpinv,) * 4))
