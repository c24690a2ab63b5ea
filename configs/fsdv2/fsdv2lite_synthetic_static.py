# FSDv2-lite on synthetic scenes with the bounds of its fixed-shape run: the same model and weights as
# fsdv2lite_synthetic.py (the model runs the dynamic path; deploy/export_onnx.py and tools/test.py --fixed-shape
# run it on padded tensors with these bounds, fsdlite/models/fsd/static.py).  Measured by
#   python tools/collect_bounds.py configs/fsdv2/fsdv2lite_synthetic.py --num-frames 20
# (random weights, margin 1.2); max_boxes covers every virtual voxel. Re-measure with --checkpoint for a
# trained model.
_base_ = ['./fsdv2lite_synthetic.py']

model = dict(
    bounds=dict(max_points=21144, max_voxels=[6770, 8010, 3630], max_fg_points=[4096, 1024, 1024], max_boxes=4382,
                max_virtual_voxels=[4382, 4361, 1990],
                max_pairs=[44765, 21188, 69912, 19871, 40992],
                max_virtual_pairs=[26710, 13214, 40174, 11072, 23588]))
