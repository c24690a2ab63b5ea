# KPCNN with rigid KPConv layers (linear influence, sum over kernel points) on synthetic shapes.
#   python tools/train.py configs/kpconv/kpcnn_kpconv_shapes.py
#   python tools/test.py configs/kpconv/kpcnn_kpconv_shapes.py work_dirs/kpcnn_kpconv_shapes/iter_1000.pth
_base_ = ['_base_/schedule_cpu.py', '_base_/kpcnn.py', '_base_/point_shapes_cls.py']
