"""The results dict that lidar datasets produce and transforms consume, and helpers to edit it.

Keys (all tensors on CPU):

* ``points`` (N, C) float32, columns ``x, y, z, ...`` (lidar frame, metres);
* ``pts_semantic_mask`` (N,) int64: class index, ``len(classes)`` = background;
* ``pts_instance_mask`` (N,) int64: row of ``gt_bboxes_3d`` the point belongs to, -1 for none;
* ``gt_bboxes_3d`` (M, 7) float32 bottom-centre lidar boxes; ``gt_labels_3d`` (M,) int64;
  ``num_points_in_gt`` (M,) int64 points counted in each box when the sample was loaded;
* ``classes`` (tuple of str), ``sample_idx`` (int), counters ``num_points_filtered`` (points dropped by
  range filters), ``num_points_invalid`` (non-finite points dropped at load), ``num_points_out_of_view`` (points
  outside the camera's view, KITTI's ``camera_fov``), ``num_objects_filtered`` (boxes dropped by class or range
  filters), ``num_rejected_objects`` / ``num_unavailable_objects`` (GT-sampled
  objects not pasted: overlapping, or missing from the database), plus augmentation records (``pcd_*``,
  ``transformation_3d_flow``); ``kitti_annos`` / ``lidar2img`` (every labelled object of the frame as loaded, for
  KITTI's scoring; augmentations leave them as they are).  Every counter is copied into ``data_sample.metainfo``
  by ``Pack3DDetInputs``.

Per-point and per-box keys are optional: helpers edit whichever are present, keeping them aligned.
"""
import torch

from fsdlite.utils.drop_report import report_dropped

POINT_KEYS = ('points', 'pts_semantic_mask', 'pts_instance_mask')
BOX_KEYS = ('gt_bboxes_3d', 'gt_labels_3d', 'num_points_in_gt')
COUNTERS = ('num_points_filtered', 'num_points_invalid', 'num_objects_filtered')
DROP_COUNTERS = COUNTERS + ('num_points_replaced', 'num_rejected_objects', 'num_unavailable_objects',
                            'num_skipped_objects', 'num_points_out_of_view')


def add_count(results, key, count):
    """Add ``count`` to the integer counter ``results[key]`` (created at 0)."""
    results[key] = int(results.get(key, 0)) + int(count)


def count_dropped(owner, results, key, count, total, what):
    """Add ``count`` dropped items to ``results[key]`` and report them (:func:`report_dropped`).

    ``total`` is the number of items before the drop and ``what`` says which were dropped, e.g.
    ``'points outside point_cloud_range=[...]'``.
    """
    add_count(results, key, count)
    report_dropped(owner, key, count, lambda: f"dropped {int(count)} of {int(total)} {what} "
                                              f"(sample_idx={results.get('sample_idx')})")


def num_classes(results):
    """Number of annotated classes (the background id of ``pts_semantic_mask``)."""
    if 'classes' not in results:
        raise KeyError("results has no 'classes' entry: the dataset must provide the class names")
    return len(results['classes'])


def select_points(results, keep):
    """Keep the points selected by ``keep`` (bool mask or index tensor) in every per-point key."""
    for key in POINT_KEYS:
        if key in results:
            results[key] = results[key][keep]
    return results


def select_boxes(results, keep):
    """Keep the boxes where ``keep`` (M,) bool is True; points of dropped boxes become background.

    ``pts_instance_mask`` is renumbered to the kept rows; a point whose box is dropped gets instance -1
    and (when ``pts_semantic_mask`` exists) the background class.
    """
    keep = torch.as_tensor(keep, dtype=torch.bool)
    for key in BOX_KEYS:
        if key in results:
            results[key] = results[key][keep]
    if 'pts_instance_mask' in results:
        inst = results['pts_instance_mask']
        new_index = torch.full((keep.numel() + 1,), -1, dtype=torch.long)
        new_index[:-1][keep] = torch.arange(int(keep.sum()))
        remapped = new_index[torch.where(inst >= 0, inst, torch.full_like(inst, keep.numel()))]
        if 'pts_semantic_mask' in results:
            lost = (inst >= 0) & (remapped < 0)
            results['pts_semantic_mask'] = torch.where(
                lost, torch.full_like(inst, num_classes(results)), results['pts_semantic_mask'])
        results['pts_instance_mask'] = remapped
    return results


def append_flow(results, step):
    """Record an augmentation step ('R', 'S', 'T', 'HF', 'VF') in ``transformation_3d_flow``."""
    results['transformation_3d_flow'] = list(results.get('transformation_3d_flow', [])) + [step]
