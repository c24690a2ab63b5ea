# KPCNN with deformable KPConv in the two deepest stages (offsets predicted by a rigid KPConv, fitting and
# repulsion regularisers added as loss_deform, offsets learned at 0.1x the learning rate as in KPConv).
#   python tools/train.py configs/kpconv/kpcnn_kpconv_deformable_shapes.py
_base_ = ['_base_/schedule_cpu.py', '_base_/kpcnn.py', '_base_/point_shapes_cls.py']
deformable = dict(type='KPConv', deformable=True, repulse_extent=1.2)
# deform_fitting_power 0.1 (KPConv-PyTorch: 1.0): over this short schedule the summed regularisers of the
# four deformable layers would otherwise outweigh the classification loss.
model = dict(backbone=dict(conv_types=('KPConv', 'KPConv', deformable, deformable)), deform_fitting_power=0.1)
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'offset_conv': dict(lr_mult=0.1)}))
