# FSD-lite on synthetic scenes with the bounds of its fixed-shape run: the same model and weights as
# fsdlite_synthetic.py (the model runs the dynamic path; deploy/export_onnx.py and tools/test.py --fixed-shape run
# it on padded tensors with these bounds, fsdlite/models/fsd/static.py).  Measured by
#   python tools/collect_bounds.py configs/fsd/fsdlite_synthetic.py --num-frames 20
# (random weights, margin 1.2); max_boxes covers every cluster and max_cc_iters has headroom, since a trained
# model's foreground differs; max_refiner_pairs (random weights select no box) is 1.3x the most a trained
# checkpoint needed on those frames. Re-measure with --checkpoint for a trained model.
_base_ = ['./fsdlite_synthetic.py']

model = dict(
    bounds=dict(max_points=21144, max_voxels=[6770, 8010, 3630], max_fg_points=[4096, 1024, 1024], max_boxes=484,
                max_clusters=484, max_cc_iters=8,
                max_pairs=[44765, 21188, 69912, 19871, 40992], max_refiner_pairs=11500))
