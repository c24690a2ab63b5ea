# FSDv2-lite (the default model of fsdv2lite_model.py) over a Waymo-sized range, [-80, 80] m x [-80, 80] m x
# [-2, 6] m: the grid of spconv's 198k-point benchmark frame (../shared/data/spconv_waymo/benchmark-pc.npz,
# x, y, z only: a zero intensity column is appended). Used by benchmarks/fsd_latency.py; no dataset.
# The bounds serve the fixed-shape run (fsdlite.deploy.fixed_shape); they were measured on that frame with random weights
# and a 1.2 margin; max_boxes covers every virtual voxel holding virtual points (with random weights the
# benchmark sets the score threshold to 0) -- re-measure with tools/collect_bounds.py and a trained
# checkpoint for real data (a trained model keeps far fewer boxes; TensorRT's TopK needs K < 3840).
_base_ = ['./fsdv2lite_model.py']

point_range = [-80.0, -80.0, -2.0, 80.0, 80.0, 6.0]
model = dict(
    point_range=point_range,
    bounds=dict(max_points=237756, max_voxels=[61737, 46000, 19344], max_fg_points=[4096, 1024, 1024],
                max_boxes=6144, max_virtual_voxels=[33491, 23187, 8792],
                max_pairs=[521999, 208916, 619864, 151108, 304320],
                max_virtual_pairs=[300480, 113293, 326745, 76114, 147573]))
