"""What the fixed-shape mode of FSD-lite / FSDv2-lite needs, measured on the dynamic path.

The model declares its bounds once (``model.bound_schema()``); this module measures each of them for one
preprocessed batch: points, the voxels of every level of every UNet the schema names (as spconv's
``record_voxel_count``), the rulebook pairs of every conv slot, foreground points per class, the instance stage's
sizes, the boxes above the score threshold and the box refiner's pairs.  ``tools/collect_bounds.py`` and the
detector's deploy adapter use it.
"""
import torch

from fsdlite.models.layers.execution import gather
from fsdlite.structures.bounds import scale_bounds


def _clusters(model, inputs, run):
    return int(run['inst'].feats.shape[0])


def _cc_iters(model, inputs, run):
    fg = run['fg']
    p = fg.centre.shape[0]
    if not p:
        return 0
    return int(model.cluster_assigner(fg.centre, fg.class_id, fg.batch, inputs['batch_size'],
                                      bounds=(p, None)).cc_iters)


def _refiner_pairs(model, inputs, run):
    selected = model.bbox_head.select(run['cls_logits'], run['box_codes'], run['inst'].xyz, run['inst'].batch,
                                      run['inst'].labels)
    if not selected['boxes'].shape[0]:
        return 0
    fg = run['fg']
    return int(model.refiner_pairs(inputs, fg, gather(inputs['points'], fg.point_index), selected)[3].box.numel())


#: graph-stage bounds measured from the dynamic run (``run``: ``fg`` foreground, ``inst`` instances, the box head's
#: ``cls_logits`` and ``box_codes``); the UNet levels and pairs of a schema are measured generically
GRAPH_MEASURES = {'max_clusters': _clusters, 'max_cc_iters': _cc_iters, 'max_refiner_pairs': _refiner_pairs}


@torch.no_grad()
def measure_bounds(model, inputs):
    """Sizes the fixed-shape path of ``model`` needs for one preprocessed batch (its data preprocessor's output).

    Returns:
        dict: name -> int or list of ints, every bound of ``model.bound_schema()`` (optional ones too).
    Raises:
        NotImplementedError: the schema names a bound this module cannot measure.
    """
    schema, c = model.bound_schema(), model.num_classes
    needed = {s.name: ([0] * s.entries if s.entries else 0) for s in schema}
    needed['max_points'] = int(inputs['points'].shape[0])
    unmeasurable = [s.name for s in schema if s.unet is None and s.pairs_of is None and s.name not in
                    ('max_points', 'max_fg_points', 'max_boxes', *GRAPH_MEASURES)]
    if unmeasurable:
        raise NotImplementedError(f'{schema.owner}: no measurement of bounds {unmeasurable}')
    unets = {s.name: getattr(model, s.unet) for s in schema if s.unet is not None}
    unet_voxels, hooks = {}, []
    for name, unet in unets.items():
        def input_hook(module, args, name=name):  # SparseUNet.forward(voxel_feats, voxel_coors, batch_size)
            unet_voxels[name] = args[1]
        hooks.append(unet.register_forward_pre_hook(input_hook))
    try:
        if not inputs['voxel_coors'].shape[0]:
            return needed
        _, inst, cls_logits, box_codes, fg = model._forward_instances(inputs, False, return_fg=True)
    finally:
        for h in hooks:
            h.remove()
    run = dict(fg=fg, inst=inst, cls_logits=cls_logits, box_codes=box_codes)
    per = torch.bincount(fg.batch * c + fg.class_id, minlength=inputs['batch_size'] * c)
    needed['max_fg_points'] = per.view(-1, c).max(0).values.tolist()
    scores = model.bbox_head.decode(cls_logits, box_codes, inst.xyz, inst.labels)[1]
    needed['max_boxes'] = int((scores > model.bbox_head.test_cfg['score_thr']).sum())
    for name, measure in GRAPH_MEASURES.items():
        if name in needed:
            needed[name] = measure(model, inputs, run)
    for name, unet in unets.items():  # the voxels of every level (spconv's record count)
        if name in unet_voxels:
            _, levels = unet.conv_plan().exact_kernel_maps(unet_voxels[name].long())
            needed[name] = [int(level.shape[0]) for level in levels]
    for spec in schema:
        if spec.pairs_of is not None and spec.pairs_of in unet_voxels:
            coors, levels = unet_voxels[spec.pairs_of], [max(v, 1) for v in needed[spec.pairs_of]]
            plan = unets[spec.pairs_of].conv_plan()
            nbrs, _, _ = plan.build_rulebooks(coors, coors.shape[0], levels, inverse_maps=False)
            needed[spec.name] = plan.count_pairs(nbrs, levels).tolist()
    return needed


def bounds_with_margin(model, maxima, margin):
    """Bounds from measured needs (:func:`measure_bounds` maxima): every entry times ``margin`` rounded up (at least
    1), the per-class foreground bounds capped at the sampler's budget (the fixed-shape path never selects more).
    Raises a ValueError unless ``margin >= 1``."""
    if not margin >= 1:
        raise ValueError(f'margin must be >= 1, got {margin!r}')
    bounds = scale_bounds(maxima, margin)
    bounds['max_fg_points'] = [min(v, b) for v, b in zip(bounds['max_fg_points'], model.fg_sampler.max_per_class)]
    return bounds


__all__ = ['GRAPH_MEASURES', 'bounds_with_margin', 'measure_bounds']
