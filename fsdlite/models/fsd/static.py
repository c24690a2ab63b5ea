"""Fixed-shape (``static=True``) mode of FSD-lite / FSDv2-lite: the same modules and weights on padded tensors.

Three explicit parts (DESIGN.md "Fixed shapes"):

1. **pre-ops** (:meth:`StaticDetectorMixin.static_inputs`, eager, ``fsdlite.ops``): the data preprocessor's voxel
   hashing, padding to ``max_points`` / ``max_voxels[0]`` (dump slots), and the first-stage UNet's sparse-conv
   rulebooks as padded neighbour maps (``max_voxels[s]`` per level);
2. the **fixed-shape forward** (:meth:`StaticDetectorMixin.forward_static`): pure tensor code (what ``deploy/``
   exports, see :class:`StaticGraph`): rulebook gather-GEMM convs with spconv's weights, ``static_segment_reduce``,
   per-class top-k foreground budgets (``max_fg_points``), the detector's instance stage (``static_instances``:
   FSD-lite clusters / FSDv2-lite virtual voxels), the box head and the ``max_boxes`` best boxes above the score
   threshold.  No ``torch.unique``, boolean-mask indexing, ``nonzero`` or loop over samples;
3. **NMS** after the graph (:meth:`StaticDetectorMixin.predict_static`).

Bounds count over one forward call (the whole batch), except ``max_fg_points`` (per sample and class, like the
sampler's budget).  Overflow raises :class:`~fsdlite.structures.bounds.BoundExceededError` in eager mode; while
exporting, results are truncated deterministically and the counts come out as ``dropped`` (names in
:meth:`StaticDetectorMixin.dropped_names`).  When no bound is exceeded the boxes and scores equal the dynamic
mode's (tests/models/fsd/test_static_*.py).
"""
import contextlib
from typing import NamedTuple, Optional

import torch
from torch import nn

from fsdlite.structures.bound_schema import BoundSchema, BoundSpec
from fsdlite.structures.bounds import check_bound
from fsdlite.structures.padded import pad_to_bound, valid_mask
from fsdlite.utils.compat import spconv_available




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
    dropped: torch.Tensor      #: int64 items beyond the bounds (strict=False), :meth:`dropped_names` ``('pre')`` order


class RulebookMaps(NamedTuple):
    """The first-stage UNet's neighbour maps of one preprocessed batch at some level bounds
    (:meth:`StaticDetectorMixin.first_stage_rulebooks`); :meth:`StaticDetectorMixin.static_inputs` of a model with
    smaller (or equal) bounds reuses them (``ConvPlan.shrink_rulebooks``) instead of building its own."""

    nbrs: tuple        #: (V_s, K) int64 maps in execution order (inverse maps None when pair lists are used)
    max_voxels: tuple  #: the level bounds they were built at
    needed: tuple      #: voxels each level needs (level 0: the input voxels; deeper: valid + dropped)


class ExactRulebooks(NamedTuple):
    """The first-stage UNet's exact offset-grouped pairs of one preprocessed batch, whatever the bounds
    (``ConvPlan.exact_kernel_maps``), for models on pair lists: :meth:`StaticDetectorMixin.static_inputs` of every
    capacity tier whose levels they fit tiles them into its pair lists (``ConvPlan.pair_lists_from_exact``)."""

    kernel_maps: list  #: exact ``KernelMap`` of every conv in execution order (level 0 in the input's row order)
    needed: tuple      #: voxels of every level (level 0: the input voxels)
    pairs: tuple       #: real pairs per ``ConvPlan.pair_slots`` entry


class PaddedInstances(NamedTuple):
    """Instances of the fixed-shape forward (K slots): ``feats`` (K, D), ``xyz`` (K, 3), ``batch`` (K,), ``labels``
    (K,) or None (the head predicts the class), ``valid`` (K,) bool, ``num`` () int64, ``dropped`` (D_i,) int64
    overflow of the detector's instance bounds (:meth:`StaticDetectorMixin.instance_bound_names`)."""

    feats: torch.Tensor
    xyz: torch.Tensor
    batch: torch.Tensor
    labels: Optional[torch.Tensor]
    valid: torch.Tensor
    num: torch.Tensor
    dropped: torch.Tensor


GRAPH_OUTPUTS = ('boxes', 'scores', 'labels', 'batch', 'num_boxes', 'dropped')


class StaticDetectorMixin:
    """Fixed-shape mode shared by the detectors (see the module docstring).

    Subclasses define :meth:`instance_bounds` and :meth:`static_instances`, and call :meth:`_init_static` at the end
    of their constructor.
    """

    def _init_static(self, static, bounds):
        self.static = bool(static)
        if self.static and bounds is None:
            raise ValueError(f'{type(self).__name__}: static=True needs bounds=dict(...) with '
                             f'{sorted(self.bound_schema().required())} (tools/collect_bounds.py measures them)')
        self.bounds = None if bounds is None else self.bound_schema().normalize(bounds)

    def bound_schema(self):
        """The model's bounds (:class:`~fsdlite.structures.bound_schema.BoundSchema`), in ``dropped`` order.

        Pre-ops: ``max_points``; ``max_voxels`` per first-stage UNet level; optional ``max_pairs`` per
        ``ConvPlan.pair_slots`` entry (the first-stage neighbour maps become pair lists: only real pairs are gathered
        and multiplied).  Graph: ``max_fg_points`` per class, the detector's :meth:`instance_bounds`, ``max_boxes``.
        """
        return BoundSchema(type(self).__name__, (
            BoundSpec('max_points', stage='pre'),
            BoundSpec('max_voxels', len(self.backbone.encoder), stage='pre', unet='backbone'),
            BoundSpec('max_pairs', self.backbone.conv_plan().pair_slots(), stage='pre', optional=True,
                      pairs_of='max_voxels'),
            BoundSpec('max_fg_points', self.num_classes),
            *self.instance_bounds(),
            BoundSpec('max_boxes')))

    def instance_bounds(self):
        """The :class:`~fsdlite.structures.bound_schema.BoundSpec` of the detector's instance stage, in the order of
        :attr:`PaddedInstances.dropped`."""
        return ()

    def dropped_names(self, stage):
        """Names of the ``dropped`` counts of the pre-ops (``stage='pre'``, :attr:`StaticInputs.dropped`) or of the
        fixed-shape forward (``'graph'``), for this model's bounds."""
        return self.bound_schema().dropped_names(self.bounds or {}, stage)

    def uses_pair_lists(self):
        """True when the bounds define ``max_pairs`` (the first-stage UNet runs on pair lists)."""
        return self.bounds is not None and 'max_pairs' in self.bounds

    def _require_bounds(self):
        if self.bounds is None:
            raise RuntimeError(f'{type(self).__name__}: the fixed-shape path needs bounds=dict(...) in the config')
        if self.training:
            raise RuntimeError(f'{type(self).__name__}: the fixed-shape path is for inference; call model.eval() '
                               '(training always runs the dynamic path)')

    # ----------------------------------------------------------------------------------------------- pre-ops
    def first_stage_rulebooks(self, inputs, strict=None, neighbour_maps=False):
        """The first-stage rulebooks of a preprocessed batch, the part of the pre-ops a model with smaller bounds (a
        deploy capacity tier) can reuse: :class:`ExactRulebooks` when the model runs on pair lists, else the
        neighbour maps at this model's level bounds (:class:`RulebookMaps`).

        Args:
            inputs (dict): output of the data preprocessor.
            strict (bool, optional): raise when a level overflows its bound (default True); False truncates (maps)
                or only measures (exact rulebooks).
            neighbour_maps (bool): the maps also for a model on pair lists (the path of a batch with a level beyond
                its bound, which :meth:`static_inputs` then cuts and counts).
        """
        self._require_bounds()
        strict = True if strict is None else strict
        if self.uses_pair_lists() and not neighbour_maps:
            plan = self.backbone.conv_plan()
            maps, levels = plan.exact_kernel_maps(inputs['voxel_coors'].long())
            needed = tuple(int(c.shape[0]) for c in levels)
            for s, (n, b) in enumerate(zip(needed, self.bounds['max_voxels'])):
                check_bound(n, b, f'max_voxels[{s}]', strict=strict)
            return ExactRulebooks(maps, needed, tuple(plan.exact_pair_counts(maps).tolist()))
        coors, _ = pad_to_bound(inputs['voxel_coors'], self.bounds['max_voxels'][0], 'max_voxels[0]', strict=strict)
        return self._rulebook_maps(coors, inputs['voxel_coors'].shape[0], strict)

    def _rulebook_maps(self, coors, num_input_voxels, strict):
        levels = self.bounds['max_voxels']
        nbrs, counts, dropped = self.backbone.conv_plan().build_rulebooks(coors.data, coors.num_valid, levels,
                                                                          strict=strict,
                                                                          inverse_maps=not self.uses_pair_lists())
        needed = (int(num_input_voxels),) + tuple(int(c) + int(d) for c, d in zip(counts[1:], dropped[1:]))
        return RulebookMaps(tuple(nbrs), tuple(levels), needed)

    def static_inputs(self, inputs, strict=None, maps=None):
        """Pre-ops: pad the preprocessor's output to the bounds and build the first-stage rulebooks (eager).

        Args:
            inputs (dict): output of the data preprocessor (``points``, ``batch``, ``voxel_coors``,
                ``point2voxel``); its voxelization is the voxel hashing of the pre-ops.
            strict (bool, optional): raise when a bound of the pre-ops (``max_points``, ``max_voxels[s]``,
                ``max_pairs``) overflows (default True); False truncates and counts (deploy runtimes).
            maps (ExactRulebooks | RulebookMaps, optional): :meth:`first_stage_rulebooks` of the same inputs (by a
                model with bounds >= these for maps, cut to these bounds), instead of building them again.
        Returns:
            StaticInputs
        """
        self._require_bounds()
        strict = True if strict is None else strict
        levels = self.bounds['max_voxels']
        plan = self.backbone.conv_plan()
        points, drop_p = pad_to_bound(inputs['points'], self.bounds['max_points'], 'max_points', strict=strict)
        batch, _ = pad_to_bound(inputs['batch'], points.bound, 'max_points', strict=False)
        coors, drop_v = pad_to_bound(inputs['voxel_coors'], levels[0], 'max_voxels[0]', strict=strict)
        p2v = inputs['point2voxel'][:points.bound]
        p2v = torch.where(p2v < coors.bound, p2v, torch.full_like(p2v, coors.bound))
        p2v = torch.cat([p2v, p2v.new_full((points.bound - p2v.shape[0],), coors.bound)])
        if self.uses_pair_lists() and maps is None:
            maps = self.first_stage_rulebooks(inputs, strict=False)
        if isinstance(maps, ExactRulebooks) and not any(n > b for n, b in zip(maps.needed, levels)):
            nbrs, drop_pairs = plan.pair_lists_from_exact(maps.kernel_maps, levels, self.bounds['max_pairs'],
                                                          strict=strict)
            dropped = [drop_p, drop_v.to(drop_p)] + [drop_p.new_zeros(()) for _ in levels[1:]]
            dropped += list(drop_pairs.to(drop_p))
        else:  # neighbour maps (also the pair lists of a batch with a level beyond its bound: cut, counted)
            if not isinstance(maps, RulebookMaps):
                maps = self._rulebook_maps(coors, inputs['voxel_coors'].shape[0], strict)
            nbrs = plan.shrink_rulebooks(maps.nbrs, maps.max_voxels, levels)
            dropped = [drop_p, drop_v.to(drop_p)] + [
                check_bound(n, b, f'max_voxels[{s}]', strict=strict).to(drop_p)
                for s, (n, b) in enumerate(zip(maps.needed, levels)) if s > 0]
            if self.uses_pair_lists():
                nbrs, drop_pairs = plan.build_pair_lists(nbrs, levels, self.bounds['max_pairs'], strict=strict)
                dropped += list(drop_pairs.to(drop_p))
        dropped = torch.stack(dropped)
        return StaticInputs(points.data, batch.data, points.num_valid, p2v, coors.data, coors.num_valid,
                            tuple(nbrs), dropped)

    # ------------------------------------------------------------------------------------ fixed-shape forward
    def extract_feat_static(self, points, point2voxel, voxel_coors, nbrs):
        """(N, C_neck) point features of padded points (VFE -> rulebook UNet -> neck)."""
        voxel_feats, _ = self.voxel_encoder(points, point2voxel, voxel_coors, padded=True)
        plan, levels = self.backbone.conv_plan(), self.bounds['max_voxels']
        maps = plan.tiled_kernel_maps(nbrs, levels) if self.uses_pair_lists() \
            else plan.dense_kernel_maps(nbrs, levels)
        voxel_feats = self.backbone(voxel_feats, kernel_maps=maps)
        return self.neck(voxel_feats, points, point2voxel, voxel_coors, padded=True)

    def forward_static(self, points, batch, num_points, point2voxel, voxel_coors, num_voxels, nbrs, batch_size,
                       strict=None):
        """The fixed-shape forward (first six arguments and ``nbrs`` as :class:`StaticInputs`).

        Args:
            batch_size (int): B (a constant of the graph).
            strict (bool, optional): raise on overflow (default: eager mode; exporting truncates and counts).
        Returns:
            dict: ``boxes`` (M, 7), ``scores`` (M,), ``labels`` (M,), ``batch`` (M,) the ``num_boxes`` best boxes
            above the score threshold before NMS (M = max_boxes); ``dropped`` (D,) int64 overflow per
            :meth:`dropped_names` ``('graph')``; and the raw outputs ``seg_logits`` (N, C), ``cls_logits`` (K, C),
            ``box_codes`` (K, C, 8), ``instance_xyz`` (K, 3), ``instance_batch`` (K,), ``instance_labels`` (K,) or
            None, ``num_instances`` (), ``num_fg_points`` ().
        """
        self._require_bounds()
        valid = valid_mask(num_points, points.shape[0], points.device)
        point_feats = self.extract_feat_static(points, point2voxel, voxel_coors, nbrs)
        seg = self.seg_head(point_feats)
        fg = self.fg_sampler.select_padded(seg['seg_logits'].sigmoid(), seg['vote_codes'], points[:, :3], batch,
                                           valid, batch_size, self.bounds['max_fg_points'], strict=strict)
        inst = self.static_instances(points, batch, num_points, point_feats, seg, fg, batch_size, strict)
        cls_logits, box_codes = self.bbox_head(inst.feats)
        sel = self.bbox_head.select_padded(cls_logits, box_codes, inst.xyz, inst.batch, inst.labels, inst.valid,
                                           self.bounds['max_boxes'], strict=strict)
        dropped = torch.cat([fg.dropped.to(sel['dropped']), inst.dropped.to(sel['dropped']), sel['dropped'].view(1)])
        return dict(boxes=sel['boxes'], scores=sel['scores'], labels=sel['labels'], batch=sel['batch'],
                    num_boxes=sel['num_boxes'], dropped=dropped, seg_logits=seg['seg_logits'], cls_logits=cls_logits,
                    box_codes=box_codes, instance_xyz=inst.xyz, instance_batch=inst.batch,
                    instance_labels=inst.labels, num_instances=inst.num, num_fg_points=fg.num_valid)

    def static_instances(self, points, batch, num_points, point_feats, seg_outputs, fg, batch_size, strict):
        """:class:`PaddedInstances` from the padded foreground (implemented by the detectors)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------------ driver
    def run_static(self, inputs, strict=None):
        """Pre-ops + fixed-shape forward on a preprocessed batch; returns (StaticInputs, outputs dict)."""
        si = self.static_inputs(inputs, strict=strict)
        out = self.forward_static(*si[:6], si.nbrs, inputs['batch_size'], strict=strict)
        return si, out

    def predict_static(self, inputs, data_samples=None):
        """Static pre-ops -> fixed-shape forward -> NMS; same outputs as the dynamic ``predict``."""
        _, out = self.run_static(inputs)
        n = int(out['num_boxes'])
        boxes, scores, labels, batch = (out[k][:n] for k in ('boxes', 'scores', 'labels', 'batch'))
        keep = self.bbox_head.nms(boxes, scores, labels, batch)
        return self.to_samples(boxes[keep], scores[keep], labels[keep], batch[keep], inputs['batch_size'],
                               data_samples)

    def static_graph(self, batch_size=1):
        """The fixed-shape forward as a module with flat tensor inputs and outputs (:class:`StaticGraph`, export)."""
        self._require_bounds()
        return StaticGraph(self, batch_size)


class StaticGraph(nn.Module):
    """Export wrapper of :meth:`StaticDetectorMixin.forward_static` (shares the detector's parameters).

    ``forward(points, batch, num_points, point2voxel, voxel_coors, num_voxels, *nbrs)`` (the fields of
    :class:`StaticInputs`) returns the tuple ``(boxes, scores, labels, batch, num_boxes, dropped)``
    (:data:`GRAPH_OUTPUTS`); NMS runs after it.
    """

    input_names = ('points', 'batch', 'num_points', 'point2voxel', 'voxel_coors', 'num_voxels')

    def __init__(self, detector, batch_size=1):
        super().__init__()
        self.detector = detector
        self.batch_size = int(batch_size)
        self.output_names = GRAPH_OUTPUTS
        self.dropped_names = detector.dropped_names('graph')

    def forward(self, points, batch, num_points, point2voxel, voxel_coors, num_voxels, *nbrs):
        """The detector's ``forward_static`` (default ``strict``: raise eagerly, truncate while exporting), as a
        tuple in :data:`GRAPH_OUTPUTS` order."""
        out = self.detector.forward_static(points, batch, num_points, point2voxel, voxel_coors, num_voxels,
                                           list(nbrs), self.batch_size)
        return tuple(out[k] for k in GRAPH_OUTPUTS)


@contextlib.contextmanager
def dynamic_path(model, conv_backend=None):
    """Run ``model`` on its dynamic path inside the block, with its sparse-conv layers called as modules.

    Both paths share the weights and compute the same values; the dynamic one sees no padding. Inside the block a
    ``static`` model runs eagerly, so module hooks see every conv layer called on a sparse tensor (the fixed-shape
    path runs them too, on plain tensors and padded maps) -- what the slim tracer and the cost counter need.
    ``conv_backend`` (``'spconv'``, ``'fsdlite'`` or ``'auto'``) sets the backend of every submodule with a
    ``conv_backend`` (SparseUNet) for the block; None keeps each module's own. ``'spconv'`` falls back to
    ``'auto'`` where spconv does not import (the same values). The previous settings come back afterwards.
    """
    previous = getattr(model, 'static', False)
    backends = [(m, m.conv_backend) for m in model.modules() if hasattr(m, 'conv_backend')]
    if previous:
        model.static = False
    if conv_backend is not None:
        runnable = conv_backend != 'spconv' or spconv_available()
        for module, _ in backends:
            module.conv_backend = conv_backend if runnable else 'auto'
    try:
        yield model
    finally:
        if previous:
            model.static = previous
        for module, backend in backends:
            module.conv_backend = backend


__all__ = ['RulebookMaps', 'ExactRulebooks', 'dynamic_path', 'StaticInputs', 'PaddedInstances', 'GRAPH_OUTPUTS',
           'StaticDetectorMixin', 'StaticGraph']
