"""Fixed-shape forward of FSD-lite / FSDv2-lite: the same modules, weights and forward on padded tensors.

:meth:`StaticDetectorMixin.forward_static` runs the detector's one forward (``_forward_instances``) in the fixed
execution mode (:mod:`~fsdlite.models.layers.execution`) on padded inputs, then keeps the ``max_boxes`` best boxes
above the score threshold.  In that mode every step is pure tensor code with dump slots (what
``fsdlite.deploy.detector.DetectorGraph`` exports): rulebook gather-GEMM convs with spconv's weights, dump-slot
gathers and reductions, per-class top-k foreground budgets (``max_fg_points``) and the detector's bounded instance
stage (FSD-lite clusters / FSDv2-lite virtual voxels).  No ``torch.unique``, boolean-mask indexing, ``nonzero`` or
loop over samples.  Its inputs come from the pre-ops and NMS runs after it, both in ``fsdlite.deploy.fixed_shape``.

The model's ``bounds`` (config) follow its :meth:`StaticDetectorMixin.bound_schema`.  Bounds count over one forward
call (the whole batch), except ``max_fg_points`` (per sample and class, like the sampler's budget).  Overflow raises
:class:`~fsdlite.structures.bounds.BoundExceededError` in eager mode; while exporting, results are truncated
deterministically and the counts come out as ``dropped`` (names in :meth:`StaticDetectorMixin.dropped_names`).  When
no bound is exceeded the boxes and scores equal the dynamic mode's (tests/models/fsd/test_static_*.py).
"""
import torch

from fsdlite.structures.bound_schema import BoundSchema, BoundSpec

from ..layers.execution import fixed_shapes


class StaticDetectorMixin:
    """Fixed-shape mode shared by the detectors (see the module docstring).

    Subclasses define :meth:`instance_bounds` and an ``instances`` that runs in both execution modes, and call
    :meth:`_init_static` at the end of their constructor.
    """

    def _init_static(self, bounds):
        self.bounds = None if bounds is None else self.bound_schema().normalize(bounds)

    def bound_schema(self):
        """The model's bounds (:class:`~fsdlite.structures.bound_schema.BoundSchema`), in ``dropped`` order.

        Pre-ops: ``max_points``; ``max_voxels`` per first-stage UNet level; optional ``max_pairs`` per
        ``ConvPlan.pair_slots`` entry (the first-stage neighbour maps become pair lists: only real pairs are gathered
        and multiplied).  Graph: ``max_fg_points`` per class, the detector's :meth:`instance_bounds`, ``max_boxes``,
        the :meth:`refiner_bounds`.
        """
        return BoundSchema(type(self).__name__, (
            BoundSpec('max_points', stage='pre'),
            BoundSpec('max_voxels', len(self.backbone.encoder), stage='pre', unet='backbone'),
            BoundSpec('max_pairs', self.backbone.conv_plan().pair_slots(), stage='pre', optional=True,
                      pairs_of='max_voxels'),
            BoundSpec('max_fg_points', self.num_classes),
            *self.instance_bounds(),
            BoundSpec('max_boxes'),
            *self.refiner_bounds()))

    def instance_bounds(self):
        """The :class:`~fsdlite.structures.bound_schema.BoundSpec` of the detector's instance stage, in the order of
        the fixed-shape ``Instances.dropped``."""
        return ()

    def refiner_bounds(self):
        """With a box refiner, the optional ``max_refiner_pairs``: the (box, point) pairs it encodes, packed (else
        every refined box has ``max_points`` rows). They follow the frame's foreground, so a tier scales them."""
        if getattr(self, 'refiner', None) is None:
            return ()
        return (BoundSpec('max_refiner_pairs', optional=True, tier_scaled=True),)

    def dropped_names(self, stage):
        """Names of the ``dropped`` counts of the pre-ops (``stage='pre'``,
        ``fsdlite.deploy.fixed_shape.StaticInputs.dropped``) or of the fixed-shape forward (``'graph'``), for this
        model's bounds."""
        return self.bound_schema().dropped_names(self.bounds or {}, stage)

    def uses_pair_lists(self):
        """True when the bounds define ``max_pairs`` (the first-stage UNet runs on pair lists)."""
        return self.bounds is not None and 'max_pairs' in self.bounds

    def require_bounds(self):
        """Raise unless the fixed-shape forward can run: ``bounds`` given (ValueError) and eval mode (RuntimeError)."""
        if self.bounds is None:
            raise ValueError(f'{type(self).__name__}: the fixed-shape forward needs bounds=dict(...) in the model '
                             'config (tools/collect_bounds.py measures them)')
        if self.training:
            raise RuntimeError(f'{type(self).__name__}: the fixed-shape path is for inference; call model.eval() '
                               '(training always runs the dynamic path)')

    # ------------------------------------------------------------------------------------ fixed-shape forward
    def forward_static(self, points, batch, num_points, point2voxel, voxel_coors, num_voxels, nbrs, batch_size,
                       strict=None):
        """The fixed-shape forward (first six arguments and ``nbrs`` as ``fsdlite.deploy.fixed_shape.StaticInputs``).

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
        self.require_bounds()
        plan, levels = self.backbone.conv_plan(), self.bounds['max_voxels']
        maps = plan.tiled_kernel_maps(nbrs, levels) if self.uses_pair_lists() else plan.dense_kernel_maps(nbrs, levels)
        inputs = dict(points=points, batch=batch, num_points=num_points, point2voxel=point2voxel,
                      voxel_coors=voxel_coors, batch_size=batch_size, kernel_maps=maps, strict=strict)
        with fixed_shapes():
            seg, inst, cls_logits, box_codes, fg = self._forward_instances(inputs, False, return_fg=True)
            sel = self.refine(inputs, seg, fg, self.bbox_head.select(cls_logits, box_codes, inst.xyz, inst.batch,
                                                                 inst.labels, valid=inst.valid,
                                                                 max_boxes=self.bounds['max_boxes'], strict=strict))
        refiner = [sel['refiner_dropped'].view(1)] if 'max_refiner_pairs' in self.bounds else []
        dropped = torch.cat([fg.dropped.to(sel['dropped']), inst.dropped.to(sel['dropped']), sel['dropped'].view(1),
                             *refiner])
        return dict(boxes=sel['boxes'], scores=sel['scores'], labels=sel['labels'], batch=sel['batch'],
                    num_boxes=sel['num_boxes'], dropped=dropped, seg_logits=seg['seg_logits'], cls_logits=cls_logits,
                    box_codes=box_codes, instance_xyz=inst.xyz, instance_batch=inst.batch,
                    instance_labels=inst.labels, num_instances=inst.num, num_fg_points=fg.num_valid)


__all__ = ['StaticDetectorMixin']
