# Ablation reproducing the original KPInv setting that scored badly (compare with kpcnn_kpinv_shapes.py):
# BatchNorm momentum 0.98 given to nn.BatchNorm1d (PyTorch: weight of the NEW batch, so running stats ~
# the last batch) everywhere, BatchNorm inside the weight generator, and no normalisation or activation
# of the generated weights.  Everything else is identical to kpcnn_kpinv_shapes.py.
#   python tools/train.py configs/kpconv/kpcnn_kpinv_ablation_shapes.py
_base_ = ['_base_/schedule_cpu.py', '_base_/kpcnn.py', '_base_/point_shapes_cls.py']
bad_norm = dict(type='BN1d', momentum=0.98)
kpinv_original = dict(type='KPInv', aggregation='nearest', channels_per_group=8, reduction=1,
                      generator_norm=bad_norm, weight_norm=False, weight_act='none')
model = dict(backbone=dict(conv_types=(kpinv_original,) * 4, norm_cfg=bad_norm), norm_cfg=bad_norm)
