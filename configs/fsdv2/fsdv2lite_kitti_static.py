# FSDv2-lite on KITTI-format data with the bounds of its fixed-shape run (same model and weights as
# fsdv2lite_kitti.py: the model runs the dynamic path; deploy/export_onnx.py and tools/test.py --fixed-shape use
# the bounds).  They have about 2x headroom over what
#   python tools/collect_bounds.py configs/fsdv2/fsdv2lite_kitti.py
# measured on KITTI frame 000008 with random weights.
# Measure them on your KITTI split with a trained checkpoint (--checkpoint) before deploying.
_base_ = ['./fsdv2lite_kitti.py']

model = dict(
    bounds=dict(max_points=32768, max_voxels=[9000, 8000, 3500], max_fg_points=[4096, 1024, 1024], max_boxes=5000,
                max_virtual_voxels=[5000, 4000, 1600], max_pairs=[61500, 32000, 93000, 24000, 45000],
                max_virtual_pairs=[40000, 18000, 48500, 12000, 23500]))
