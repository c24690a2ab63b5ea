"""Benchmark cases of points_in_boxes: the C++ op vs the pure-torch reference (see benchmarks/ops.py).

Sizes: ~120k points with 50 boxes, as one sample and as a batch of 5 samples with 10 boxes each;
peak memory per variant in a fresh subprocess.
"""
import torch

from op_cases._scaffold import case


def scene(num_points, num_boxes, batches, seed=0):
    """Points in a KITTI-like range and car-sized boxes on the ground (half of them near points)."""
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(num_points, 4, generator=g) * torch.tensor([70.4, 80.0, 4.0, 1.0]) \
        - torch.tensor([0.0, 40.0, 3.0, 0.0])
    boxes = torch.rand(num_boxes * batches, 7, generator=g) * torch.tensor([70.4, 80.0, 0.2, 1.5, 0.5, 0.5, 6.28]) \
        + torch.tensor([0.0, -40.0, -1.8, 3.2, 1.4, 1.4, -3.14])
    point_batch = torch.randint(0, batches, (num_points,), generator=g) if batches > 1 else None
    box_batch = torch.arange(batches).repeat_interleave(num_boxes) if batches > 1 else None
    return points, boxes, point_batch, box_batch


def variant(variant, num_points, num_boxes, batches):
    """Zero-arg callable running one variant (used by run_isolated for peak memory)."""
    from fsdlite.ops import points_in_boxes
    from fsdlite.ops.points_in_boxes.reference import points_in_boxes_reference
    fn = points_in_boxes if variant == 'fsdlite.ops' else points_in_boxes_reference
    args = scene(num_points, num_boxes, batches)
    return lambda: fn(*args)


def cases(quick):
    """Benchmark cases (see ``benchmarks/ops.py``): 120k points, 1 sample x 50 boxes and 5 samples x 10 boxes;
    ``quick``: 12k points."""
    n = 12_000 if quick else 120_000
    return [case('points_in_boxes', f'{n // 1000}k pts x {batches}x{50 // batches} boxes', variant,
                 ('fsdlite.ops', 'torch reference'), 'torch reference', num_points=n, num_boxes=50 // batches,
                 batches=batches) for batches in (1, 5)]
