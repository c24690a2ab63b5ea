"""The fixed-shape run of FSD-lite / FSDv2-lite: pre-ops, the model's fixed-shape forward, NMS.

The model owns its fixed-shape forward (``model.forward_static``, what deploy exports) and its bounds
(``model.bounds``, declared by ``model.bound_schema()``); this module owns what runs around it:

1. **pre-ops** (:func:`fixed_inputs`, eager, ``fsdlite.ops``): the data preprocessor's voxel hashing, padding to
   ``max_points`` / ``max_voxels[0]`` (dump slots), and the first-stage UNet's sparse-conv rulebooks as padded
   neighbour maps (``max_voxels[s]`` per level) or pair lists (``max_pairs``); :func:`first_stage_rulebooks` is
   the part a capacity tier with smaller bounds can reuse;
2. the model's **fixed-shape forward** (:func:`run_fixed_shape`);
3. **NMS** after the graph (:func:`predict_fixed_shape`, the same outputs as the model's ``predict``);

and :class:`FixedShapeDetector`, the model wrapped so that mmengine's Runner evaluates the fixed-shape run
(``tools/test.py --fixed-shape``).  Overflow raises :class:`~fsdlite.structures.bounds.BoundExceededError` by
default (``strict``); a deploy runtime truncates and counts (``strict=False``, names from
``model.dropped_names('pre')``).
"""
from typing import NamedTuple

import torch
from mmengine.model import BaseModel

from fsdlite.structures.bounds import check_bound
from fsdlite.structures.padded import pad_to_bound


class StaticInputs(NamedTuple):
    """Outputs of the pre-ops (N = max_points, V0 = max_voxels[0]); the inputs of the fixed-shape forward."""

    points: torch.Tensor       #: (N, C) float points, padding rows 0
    batch: torch.Tensor        #: (N,) int64 sample ids (0 in padding)
    num_points: torch.Tensor   #: () int64 valid points
    point2voxel: torch.Tensor  #: (N,) int64 voxel row, V0 (dump) for padding
    voxel_coors: torch.Tensor  #: (V0, 4) int64 [b, z, y, x], padding rows 0
    num_voxels: torch.Tensor   #: () int64 valid voxels
    nbrs: tuple                #: first-stage UNet neighbour maps (V_s, K) in execution order, or their (3, P)
    #:                            pair lists when the bounds define ``max_pairs`` (layers.pair_conv)
    dropped: torch.Tensor      #: int64 items beyond the bounds (strict=False), ``model.dropped_names('pre')`` order


class RulebookMaps(NamedTuple):
    """The first-stage UNet's neighbour maps of one preprocessed batch at some level bounds
    (:func:`first_stage_rulebooks`); :func:`fixed_inputs` of a model with smaller (or equal) bounds reuses them
    (``ConvPlan.shrink_rulebooks``) instead of building its own."""

    nbrs: tuple        #: (V_s, K) int64 maps in execution order (inverse maps None when pair lists are used)
    max_voxels: tuple  #: the level bounds they were built at
    needed: tuple      #: voxels each level needs (level 0: the input voxels; deeper: valid + dropped)


class ExactRulebooks(NamedTuple):
    """The first-stage UNet's exact offset-grouped pairs of one preprocessed batch, whatever the bounds
    (``ConvPlan.exact_kernel_maps``), for models on pair lists: :func:`fixed_inputs` of every capacity tier whose
    levels they fit tiles them into its pair lists (``ConvPlan.pair_lists_from_exact``)."""

    kernel_maps: list  #: exact ``KernelMap`` of every conv in execution order (level 0 in the input's row order;
    #: ``None`` for the inverse convs, whose pair lists are their strided convs', swapped)
    needed: tuple      #: voxels of every level (level 0: the input voxels)
    pairs: tuple       #: real pairs per ``ConvPlan.pair_slots`` entry


def first_stage_rulebooks(model, inputs, strict=True, neighbour_maps=False):
    """The first-stage rulebooks of a preprocessed batch, the part of the pre-ops a model with smaller bounds (a
    deploy capacity tier) can reuse: :class:`ExactRulebooks` when the model runs on pair lists, else the
    neighbour maps at the model's level bounds (:class:`RulebookMaps`).

    Args:
        model: FSD-lite / FSDv2-lite with ``bounds``.
        inputs (dict): output of the data preprocessor.
        strict (bool): raise when a level overflows its bound; False truncates (maps) or only measures (exact).
        neighbour_maps (bool): the maps also for a model on pair lists (the path of a batch with a level beyond
            its bound, which :func:`fixed_inputs` then cuts and counts).
    """
    model.require_bounds()
    if model.uses_pair_lists() and not neighbour_maps:
        plan = model.backbone.conv_plan()
        maps, levels = plan.exact_kernel_maps(inputs['voxel_coors'].long(), inverse_maps=False)
        needed = tuple(int(c.shape[0]) for c in levels)
        for s, (n, b) in enumerate(zip(needed, model.bounds['max_voxels'])):
            check_bound(n, b, f'max_voxels[{s}]', strict=strict)
        return ExactRulebooks(maps, needed, tuple(plan.exact_pair_counts(maps).tolist()))
    coors, _ = pad_to_bound(inputs['voxel_coors'], model.bounds['max_voxels'][0], 'max_voxels[0]', strict=strict)
    return _rulebook_maps(model, coors, inputs['voxel_coors'].shape[0], strict)


def _rulebook_maps(model, coors, num_input_voxels, strict):
    levels = model.bounds['max_voxels']
    nbrs, counts, dropped = model.backbone.conv_plan().build_rulebooks(coors.data, coors.num_valid, levels,
                                                                       strict=strict,
                                                                       inverse_maps=not model.uses_pair_lists())
    needed = (int(num_input_voxels),) + tuple(int(c) + int(d) for c, d in zip(counts[1:], dropped[1:]))
    return RulebookMaps(tuple(nbrs), tuple(levels), needed)


def fixed_inputs(model, inputs, strict=True, maps=None):
    """Pre-ops: pad the preprocessor's output to the model's bounds and build the first-stage rulebooks (eager).

    Args:
        model: FSD-lite / FSDv2-lite with ``bounds``, in eval mode.
        inputs (dict): output of the data preprocessor (``points``, ``batch``, ``voxel_coors``,
            ``point2voxel``); its voxelization is the voxel hashing of the pre-ops.
        strict (bool): raise when a bound of the pre-ops (``max_points``, ``max_voxels[s]``, ``max_pairs``)
            overflows; False truncates and counts (deploy runtimes).
        maps (ExactRulebooks | RulebookMaps, optional): :func:`first_stage_rulebooks` of the same inputs (by a
            model with bounds >= these for maps, cut to these bounds), instead of building them again.
    Returns:
        StaticInputs
    """
    model.require_bounds()
    bounds = model.bounds
    levels = bounds['max_voxels']
    plan = model.backbone.conv_plan()
    points, drop_p = pad_to_bound(inputs['points'], bounds['max_points'], 'max_points', strict=strict)
    batch, _ = pad_to_bound(inputs['batch'], points.bound, 'max_points', strict=False)
    coors, drop_v = pad_to_bound(inputs['voxel_coors'], levels[0], 'max_voxels[0]', strict=strict)
    p2v = inputs['point2voxel'][:points.bound]
    p2v = torch.where(p2v < coors.bound, p2v, torch.full_like(p2v, coors.bound))
    p2v = torch.cat([p2v, p2v.new_full((points.bound - p2v.shape[0],), coors.bound)])
    if model.uses_pair_lists() and maps is None:
        maps = first_stage_rulebooks(model, inputs, strict=False)
    if isinstance(maps, ExactRulebooks) and not any(n > b for n, b in zip(maps.needed, levels)):
        nbrs, drop_pairs = plan.pair_lists_from_exact(maps.kernel_maps, levels, bounds['max_pairs'], strict=strict)
        dropped = [drop_p, drop_v.to(drop_p)] + [drop_p.new_zeros(()) for _ in levels[1:]]
        dropped += list(drop_pairs.to(drop_p))
    else:  # neighbour maps (also the pair lists of a batch with a level beyond its bound: cut, counted)
        if not isinstance(maps, RulebookMaps):
            maps = _rulebook_maps(model, coors, inputs['voxel_coors'].shape[0], strict)
        nbrs = plan.shrink_rulebooks(maps.nbrs, maps.max_voxels, levels)
        dropped = [drop_p, drop_v.to(drop_p)] + [
            check_bound(n, b, f'max_voxels[{s}]', strict=strict).to(drop_p)
            for s, (n, b) in enumerate(zip(maps.needed, levels)) if s > 0]
        if model.uses_pair_lists():
            nbrs, drop_pairs = plan.build_pair_lists(nbrs, levels, bounds['max_pairs'], strict=strict)
            dropped += list(drop_pairs.to(drop_p))
    return StaticInputs(points.data, batch.data, points.num_valid, p2v, coors.data, coors.num_valid, tuple(nbrs),
                        torch.stack(dropped))


def run_fixed_shape(model, inputs, strict=True):
    """Pre-ops + the model's fixed-shape forward on a preprocessed batch; returns (StaticInputs, outputs dict of
    ``model.forward_static``)."""
    si = fixed_inputs(model, inputs, strict=strict)
    return si, model.forward_static(*si[:6], si.nbrs, inputs['batch_size'], strict=strict)


def predict_fixed_shape(model, inputs, data_samples=None):
    """Pre-ops -> fixed-shape forward -> NMS: data samples with ``pred_instances_3d``, as the model's ``predict``
    (equal boxes and scores while no bound overflows; an overflow raises)."""
    _, out = run_fixed_shape(model, inputs)
    n = int(out['num_boxes'])
    boxes, scores, labels, batch = (out[k][:n] for k in ('boxes', 'scores', 'labels', 'batch'))
    keep = model.bbox_head.nms(boxes, scores, labels, batch)
    return model.to_samples(boxes[keep], scores[keep], labels[keep], batch[keep], inputs['batch_size'], data_samples)


class FixedShapeDetector(BaseModel):
    """A detector whose ``predict`` is the fixed-shape run (:func:`predict_fixed_shape`), for mmengine's Runner.

    Args:
        detector: FSD-lite / FSDv2-lite with ``bounds`` (its weights already loaded); its data preprocessor is
            this model's.

    ``forward(inputs, data_samples, mode)``: ``'predict'`` as above; ``'tensor'`` the fixed-shape forward's
    outputs; ``'loss'`` raises (training runs the dynamic path).
    """

    def __init__(self, detector):
        detector.eval().require_bounds()
        super().__init__(data_preprocessor=detector.data_preprocessor)
        self.detector = detector

    def forward(self, inputs, data_samples=None, mode='predict'):
        """See the class docstring."""
        if mode == 'predict':
            return predict_fixed_shape(self.detector, inputs, data_samples)
        if mode == 'tensor':
            return run_fixed_shape(self.detector, inputs)[1]
        raise ValueError(f"FixedShapeDetector: mode must be 'predict' or 'tensor' (the fixed-shape run is for "
                         f'inference), got {mode!r}')


__all__ = ['ExactRulebooks', 'FixedShapeDetector', 'RulebookMaps', 'StaticInputs', 'first_stage_rulebooks',
           'fixed_inputs', 'predict_fixed_shape', 'run_fixed_shape']
