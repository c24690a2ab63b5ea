# FSDv2-lite on synthetic scenes, fixed-shape mode: the same model and weights as fsdv2lite_synthetic.py
# (train with either config: training always runs the dynamic path), inference on padded tensors with these
# bounds (fsdlite/models/fsd/static.py).  Measured by
#   python tools/collect_bounds.py configs/fsdv2/fsdv2lite_synthetic.py --num-frames 20
# (random weights, margin 1.2); max_boxes covers every virtual voxel. Re-measure with --checkpoint for a
# trained model.
_base_ = ['./fsdv2lite_synthetic.py']

model = dict(
    static=True,
    bounds=dict(max_points=14798, max_voxels=[3116, 4040, 2111], max_fg_points=[4096, 1024, 1024], max_boxes=1965,
                max_virtual_voxels=[1965, 2382, 1281],
                max_pairs=[16517, 13300, 50324, 13568, 28336],
                max_virtual_pairs=[11162, 8273, 30215, 8070, 17729]))
