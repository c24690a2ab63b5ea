# FSD-lite (the default model of fsdlite_model.py) over a Waymo-sized range, [-80, 80] m x [-80, 80] m x
# [-2, 6] m: the grid of spconv's 198k-point benchmark frame (../shared/data/spconv_waymo/benchmark-pc.npz,
# x, y, z only: a zero intensity column is appended). Used by benchmarks/fsd_latency.py; no dataset.
# The bounds serve the fixed-shape run (fsdlite.deploy.fixed_shape); they were measured on that frame with random weights
# (benchmarks/fsd_latency.py --measure) and a 1.2 margin -- re-measure with tools/collect_bounds.py and a
# trained checkpoint for real data. max_clusters / max_boxes / max_cc_iters are rounded up (random weights give
# no box above the 0.1 score threshold); max_refiner_pairs is the refiner's own cap (64 boxes x 256 points).
_base_ = ['./fsdlite_model.py']

point_range = [-80.0, -80.0, -2.0, 80.0, 80.0, 6.0]
model = dict(
    point_range=point_range,
    bounds=dict(max_points=237756, max_voxels=[61737, 46000, 19344], max_fg_points=[4096, 1024, 1024],
                max_boxes=1024, max_clusters=1024, max_cc_iters=6,
                max_pairs=[521999, 208916, 619864, 151108, 304320], max_refiner_pairs=16384))
