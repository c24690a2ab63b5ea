# FSD-lite on synthetic scenes, fixed-shape mode: the same model and weights as fsdlite_synthetic.py
# (train with either config: training always runs the dynamic path), inference on padded tensors with these
# bounds (fsdlite/models/fsd/static.py).  Measured by
#   python tools/collect_bounds.py configs/fsd/fsdlite_synthetic.py --num-frames 20
# (random weights, margin 1.2); max_boxes covers every cluster and max_cc_iters has headroom, since a trained
# model's foreground differs. Re-measure with --checkpoint for a trained model.
_base_ = ['./fsdlite_synthetic.py']

model = dict(
    static=True,
    bounds=dict(max_points=14798, max_voxels=[3116, 4040, 2111], max_fg_points=[4096, 1024, 1024], max_boxes=382,
                max_clusters=382, max_cc_iters=6,
                max_pairs=[16517, 13300, 50324, 13568, 28336]))
