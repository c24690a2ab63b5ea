# The synthetic segmentor with its head replaced by a plugin component (examples/plugin).
_base_ = ['../../../configs/segmentation/sparse_segmentor_synthetic.py']

custom_imports = dict(imports=['fsdlite_plugin_example'], allow_failed_imports=False)
model = dict(seg_head=dict(type='ResidualPointSegHead'))
