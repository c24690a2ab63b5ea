# FSD-lite on KITTI-format data with the bounds of its fixed-shape run (same model and weights as fsdlite_kitti.py:
# the model runs the dynamic path; deploy/export_onnx.py and tools/test.py --fixed-shape use the bounds).  They have about 2x headroom over what
#   python tools/collect_bounds.py configs/fsd/fsdlite_kitti.py
# measured on KITTI frame 000008 with random weights.
# max_refiner_pairs (the box refiner's packed (box, point) pairs; random weights select no box) is 1.3x the most
# a checkpoint trained on the synthetic scenes needed on the 30 kitti_tiny_3d frames.
# Measure them on your KITTI split with a trained checkpoint (--checkpoint) before deploying.
_base_ = ['./fsdlite_kitti.py']

model = dict(
    bounds=dict(max_points=32768, max_voxels=[9000, 8000, 3500], max_fg_points=[4096, 1024, 1024], max_boxes=512,
                max_clusters=512, max_cc_iters=6, max_pairs=[61500, 32000, 93000, 24000, 45000],
                max_refiner_pairs=14000))
