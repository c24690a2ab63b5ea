"""Deploy adapter of the fully sparse detectors (FSD-lite, FSDv2-lite) in their fixed-shape mode.

Outside the graph (eager, ``fsdlite.ops``): the data preprocessor's voxel hashing (``fsdlite.ops.voxelize``),
padding to ``max_points`` / ``max_voxels[0]`` with dump slots, and the first-stage UNet's sparse-conv rulebooks
(``fsdlite.ops.rulebook_*``) as padded neighbour maps (``fsdlite.deploy.fixed_shape.fixed_inputs``); after the graph,
rotated BEV NMS (``fsdlite.ops.batched_nms_bev``).  Inside: the detector's ``forward_static`` (VFE, rulebook
UNet with spconv's weights, seg/vote head, per-class top-k foreground, grouping or virtual voxels with in-graph
rulebooks, SIR / mixer, box head, the ``max_boxes`` best boxes).
"""
from typing import NamedTuple

import torch

from fsdlite.models.lidar.sparse_unet import using_conv_backend
from fsdlite.models.layers.sparse_conv import PAIR_TILE
from fsdlite.structures.bounds import merge_max

from ..registry import DEPLOY_ADAPTERS
from .adapter import DeployAdapter, Frame, GraphModule, PreOpsResult
from .bound_measure import bounds_with_margin, measure_bounds
from .compare import match_detections, matched_rows_diff, tensor_diff
from .decisions import (DecisionChecks, NmsOverlap, RankCutoff, ScoreThreshold, SelectionDecision, detections_of,
                        detections_of_samples)
from .exporter import plain_config
from .fixed_shape import first_stage_rulebooks, fixed_inputs
from .frames import LIDAR_FRAMES, available_lidar_frames, load_lidar_frame

FIXED_INPUTS = {
    'points': '(N, C) float32 points (x, y, z, features) inside the point range, padding rows 0; N = max_points',
    'batch': '(N,) int64 sample of each point (0 in padding)',
    'num_points': '() int64 valid points',
    'point2voxel': '(N,) int64 voxel row of each point; V0 = max_voxels[0] (dump) for padding',
    'voxel_coors': '(V0, 4) int64 voxel [b, z, y, x], padding rows 0',
    'num_voxels': '() int64 valid voxels',
}
OUTPUTS = {
    'boxes': '(M, 7) float32 [x, y, z_bottom, l, w, h, yaw] of the num_boxes best boxes above score_thr, before '
             'NMS, best first (M = max_boxes; rows >= num_boxes are 0)',
    'scores': '(M,) float32 box scores',
    'labels': '(M,) int64 box classes',
    'box_batch': '(M,) int64 sample of each box',
    'num_boxes': '() int64 valid boxes',
    'dropped': '(D,) int64 items dropped because an in-graph bound was exceeded (names in dropped_names)',
    'seg_logits': '(N, C) float32 foreground logits per point (rows < num_points valid)',
    'cls_logits': '(K, C) float32 class logits per instance (rows < num_instances valid)',
    'box_codes': '(K, C, 8) float32 box regression codes per instance and class',
    'instance_xyz': '(K, 3) float32 reference point of each instance',
    'instance_labels': '(K,) int64 class of each instance (FSD-lite clusters)',
    'num_instances': '() int64 valid instances',
    'num_fg_points': '() int64 selected foreground points',
}
TOLERANCE = 1e-4  # abs, on logits and regressions (float32 graph vs float32 PyTorch)
#: what a flipped foreground selection changes: everything after the sampler
FOREGROUND_DOWNSTREAM = ('boxes+scores', 'num_boxes', 'dropped', 'cls_logits', 'box_codes', 'instance_xyz',
                         'instance_labels', 'num_instances', 'num_fg_points', 'detections')


class PreprocessedClouds(NamedTuple):
    """The part of the pre-ops the capacity tiers share: ``inputs``, the data preprocessor's output for one batch
    (range filter, voxel hashing: ``points`` (n, C), ``batch`` (n,), ``voxel_coors`` (v, 4), ``point2voxel``
    (n,)), and ``maps``, None or (``DetectorAdapter.measure_needs``) its first-stage rulebooks
    (``fixed_shape.first_stage_rulebooks``: what every level needs; for models on pair lists the exact
    offset-grouped pairs every tier tiles, else the maps at the largest tier's bounds the smaller tiers cut to
    theirs)."""
    inputs: dict
    maps: object = None


class DetectorGraph(GraphModule):
    """``forward(points, batch, num_points, point2voxel, voxel_coors, num_voxels, *nbrs)`` -> the outputs of
    :data:`OUTPUTS` in order (``instance_labels`` only when the detector groups per class); overflow truncates
    and is counted in ``dropped`` (also when run eagerly, so PyTorch and ONNX Runtime behave alike)."""

    def __init__(self, model, batch_size, output_names):
        super().__init__(model)
        self.batch_size = int(batch_size)
        self.output_names = list(output_names)

    def forward(self, points, batch, num_points, point2voxel, voxel_coors, num_voxels, *nbrs):
        """The detector's ``forward_static`` (non-strict: overflow truncated), outputs in ``output_names`` order."""
        out = self.model.forward_static(points, batch, num_points, point2voxel, voxel_coors, num_voxels, list(nbrs),
                                        self.batch_size, strict=False)
        out['box_batch'] = out['batch']
        return tuple(out[k] for k in self.output_names)


@DEPLOY_ADAPTERS.register_module(['FSDLite', 'FSDv2Lite'])
class DetectorAdapter(DeployAdapter):
    """FSD-lite / FSDv2-lite (``bounds`` are the model's fixed-shape bounds, ``model.bounds``).

    Raw data: a list of B point clouds, each (N_i, C) float32.  Results: data samples with
    ``pred_instances_3d`` (``bboxes_3d``, ``scores_3d``, ``labels_3d``).
    """

    family = 'detector'

    @property
    def tier_graph_bound_names(self):
        """The in-graph bounds the model's schema marks ``tier_scaled`` (FSDv2-lite: the mixer's voxels and pairs)."""
        return self.model.bound_schema().tier_scaled('graph')

    @property
    def tier_bound_names(self):
        """Every bound a capacity tier scales: the pre-ops' and :attr:`tier_graph_bound_names`."""
        return self.model.bound_schema().tier_scaled()

    def __init__(self, model, bounds, batch_size=1):
        if getattr(model, 'bounds', None) is None:
            raise ValueError(f'{type(model).__name__}: deploy needs the bounds of the fixed-shape forward '
                             '(bounds=dict(...) in the model config)')
        super().__init__(model, bounds, batch_size)
        self._num_maps = None

    # ------------------------------------------------------------------ building
    @classmethod
    def prepare_config(cls, model_cfg, bounds):
        """``model_cfg`` with ``bounds``."""
        return dict(model_cfg, bounds=dict(bounds))

    @classmethod
    def config_bounds(cls, cfg):
        """``cfg.model.bounds`` as a plain dict, or None when the config has none."""
        bounds = cfg.model.get('bounds')
        return None if bounds is None else plain_config(bounds)

    @classmethod
    def measure_bounds(cls, model, frames, margin):
        """Needed sizes on the dynamic path (:func:`~fsdlite.deploy.bound_measure.measure_bounds`) over ``frames``,
        times ``margin`` (:func:`~fsdlite.deploy.bound_measure.bounds_with_margin`: foreground bounds capped at the
        sampler's budget)."""
        maxima = {}
        with torch.no_grad():
            for frame in frames:
                inputs = model.data_preprocessor(dict(inputs=dict(points=list(frame.data))), False)['inputs']
                merge_max(maxima, measure_bounds(model, inputs))
        return bounds_with_margin(model, maxima, margin)

    @classmethod
    def frames(cls, cfg, model, batch_size, data_root=None):
        """The real frames present (KITTI 000008, nuScenes keyframe, the 198k-point Waymo-range frame), each
        repeated to fill the batch."""
        channels = model.voxel_encoder.in_channels
        out = []
        for name in available_lidar_frames(data_root):
            cloud = load_lidar_frame(name, channels, data_root)
            out.append(Frame(name, [cloud] * int(batch_size), LIDAR_FRAMES[name][2]))
        return out

    # ------------------------------------------------------------------ graph
    def _count_maps(self):
        if self._num_maps is None:
            empty = [torch.zeros(0, self.model.voxel_encoder.in_channels)] * self.batch_size
            self.pre_ops(empty)
        return self._num_maps

    def input_meanings(self):
        """:data:`FIXED_INPUTS` plus one ``nbr_XX`` per first-stage rulebook (neighbour map or pair list)."""
        if self.model.uses_pair_lists():
            meaning = ('(3, P) int64 pair list of sparse conv #{i} of the first-stage UNet (execution order): input '
                       'row (V_in = dump), output row (V_out = dump) and kernel offset of each pair, grouped by '
                       'offset into tiles of {tile} rows (a tiled fsdlite.models.layers.sparse_conv.KernelMap)')
        else:
            meaning = ('(V_s, K) int64 neighbour map of sparse conv #{i} of the first-stage UNet (execution order): '
                       'input row per output voxel and kernel offset, V_in = dump')
        maps = {f'nbr_{i:02d}': meaning.format(i=i, tile=PAIR_TILE) for i in range(self._count_maps())}
        return dict(FIXED_INPUTS, **maps)

    def output_meanings(self):
        """:data:`OUTPUTS`, without ``instance_labels`` unless the box head has ``class_given`` (per-class groups)."""
        names = list(OUTPUTS)
        if not getattr(self.model.bbox_head, 'class_given', True):
            names.remove('instance_labels')
        return {k: OUTPUTS[k] for k in names}

    def graph_module(self):
        """A :class:`DetectorGraph` returning :meth:`output_meanings` in order."""
        return DetectorGraph(self.model, self.batch_size, self.output_meanings())

    def dropped_names(self):
        """The names of the graph's ``dropped`` counts (``model.dropped_names('graph')``)."""
        return self.model.dropped_names('graph')

    def outside_graph(self):
        """Voxel hashing, padding and first-stage rulebooks before; rotated BEV NMS after."""
        return dict(
            pre_ops=['LidarDataPreprocessor: range/NaN filter and voxel hashing (fsdlite.ops.voxelize)',
                     'pad points to max_points and voxels to max_voxels[0] (dump slots; overflow truncated and '
                     'counted)',
                     (self._pair_list_pre_op if self.model.uses_pair_lists() else
                      'first-stage SparseUNet rulebooks as padded neighbour maps (fsdlite.ops.rulebook_subm / '
                      'rulebook_conv / rulebook_inverse); voxels above max_voxels[s] are dropped and counted')],
            post_ops=['rotated BEV NMS per sample and class (fsdlite.ops.batched_nms_bev, test_cfg of bbox_head)'])

    _pair_list_pre_op = ('first-stage SparseUNet rulebooks as pair lists of their real pairs (max_pairs): the '
                         'exact offset-grouped pairs (fsdlite.ops.subm_offset_pairs / conv_offset_pairs) tiled, or, '
                         'when a level exceeds max_voxels[s], padded neighbour maps (fsdlite.ops.rulebook_subm / '
                         'rulebook_conv) cut to the bounds; voxels and pairs that do not fit are dropped and counted')

    # ------------------------------------------------------------------ running
    def prepare_input(self, data):
        """:class:`PreprocessedClouds` of a list of B point clouds (passed through when already prepared); for a
        model on pair lists with its first-stage rulebooks (exact whatever the bounds: every tier tiles them)."""
        if isinstance(data, PreprocessedClouds):
            return data
        clouds = list(data)
        if len(clouds) != self.batch_size:
            raise ValueError(f'the deployed graph takes batches of {self.batch_size} point clouds, got {len(clouds)}')
        with torch.no_grad():
            inputs = self.model.data_preprocessor(dict(inputs=dict(points=clouds)), False)['inputs']
            exact = first_stage_rulebooks(self.model, inputs, strict=False) if self.model.uses_pair_lists() else None
            return PreprocessedClouds(inputs, exact)

    def measure_needs(self, prepared):
        """``prepared`` with its first-stage rulebooks built at this adapter's bounds (see PreprocessedClouds)."""
        prepared = self.prepare_input(prepared)
        if prepared.maps is not None:
            return prepared
        with torch.no_grad():
            return prepared._replace(maps=first_stage_rulebooks(self.model, prepared.inputs, strict=False))

    def may_fit(self, prepared):
        """False when the batch has more points than ``max_points`` or input voxels than ``max_voxels[0]``; once
        its needs are measured (:meth:`measure_needs`), False unless every level's voxels and every slot's
        rulebook pairs fit too (exact)."""
        prepared, bounds = self.prepare_input(prepared), self.model.bounds
        needed = (prepared.inputs['voxel_coors'].shape[0],) if prepared.maps is None else prepared.maps.needed
        if prepared.inputs['points'].shape[0] > bounds['max_points'] or any(
                n > b for n, b in zip(needed, bounds['max_voxels'])):
            return False
        if prepared.maps is None or not self.model.uses_pair_lists():
            return True
        return all(n <= b for n, b in zip(prepared.maps.pairs, bounds['max_pairs']))  # ExactRulebooks

    def pre_ops(self, data):
        """Static inputs of a batch: :data:`FIXED_INPUTS` and ``nbr_XX`` maps; context ``num_points``; drops per
        pre-op bound."""
        prepared = self.prepare_input(data)
        with torch.no_grad():
            si = fixed_inputs(self.model, prepared.inputs, strict=False, maps=prepared.maps)
        self._num_maps = len(si.nbrs)
        names = list(FIXED_INPUTS) + [f'nbr_{i:02d}' for i in range(len(si.nbrs))]
        tensors = list(si[:6]) + list(si.nbrs)
        dropped = dict(zip(self.model.dropped_names('pre'), si.dropped.tolist()))
        return PreOpsResult(dict(zip(names, tensors)), dict(num_points=int(si.num_points)), dropped)

    def post_ops(self, outputs, pre):
        """The ``num_boxes`` valid boxes after the box head's NMS: one data sample per batch entry."""
        n = int(outputs['num_boxes'])
        boxes, scores, labels, batch = (outputs[k][:n] for k in ('boxes', 'scores', 'labels', 'box_batch'))
        labels, batch = labels.long(), batch.long()
        keep = self.model.bbox_head.nms(boxes, scores, labels, batch)
        return self.model.to_samples(boxes[keep], scores[keep], labels[keep], batch[keep], self.batch_size)

    def reference(self, data):
        """The same detector's dynamic (eager, spconv) ``predict``."""
        return self._eager_predict(data, 'spconv')

    def eager(self, data):
        """The dynamic ``predict`` on the UNets' own backends (``'auto'``: fsdlite's fused kernels on the CPU)."""
        return self._eager_predict(data, None)

    def _eager_predict(self, data, conv_backend):
        with torch.no_grad(), using_conv_backend(self.model, conv_backend):
            inputs = self.model.data_preprocessor(dict(inputs=dict(points=list(data))), False)['inputs']
            return self.model(inputs, mode='predict')

    def compare_outputs(self, deployed, reference, pre):
        """Boxes + scores matched by nearest row per (label, sample) (or ``num_boxes`` when counts differ),
        ``seg_logits`` on valid points, instance outputs on valid instances, the rest exactly."""
        rows = []
        n_box = int(reference['num_boxes'])
        n_inst = int(reference['num_instances'])
        for name in self.output_meanings():
            a, b = deployed[name], reference[name]
            if name == 'boxes':
                cols = lambda o: torch.cat([o['boxes'][:n_box], o['scores'][:n_box, None]], 1)  # noqa: E731
                keys = (deployed['labels'][:n_box] * self.batch_size + deployed['box_batch'][:n_box],
                        reference['labels'][:n_box] * self.batch_size + reference['box_batch'][:n_box])
                if int(deployed['num_boxes']) == n_box:
                    rows.append(matched_rows_diff('boxes+scores', cols(deployed), cols(reference), keys, TOLERANCE))
                else:
                    rows.append(tensor_diff('boxes+scores', deployed['num_boxes'], reference['num_boxes'], 0,
                                            'box counts differ'))
            elif name in ('scores', 'labels', 'box_batch'):
                continue  # compared with the boxes (rows may swap on near-equal scores)
            elif name == 'seg_logits':
                rows.append(tensor_diff(name, a[:pre.context['num_points']], b[:pre.context['num_points']],
                                        TOLERANCE, 'valid points'))
            elif name in ('cls_logits', 'box_codes', 'instance_xyz', 'instance_labels'):
                tol = 0 if name == 'instance_labels' else TOLERANCE
                rows.append(tensor_diff(name, a[:n_inst], b[:n_inst], tol, 'valid instances'))
            else:
                rows.append(tensor_diff(name, a, b, 0))
        return rows

    detection_outputs = ('boxes+scores', 'num_boxes')

    def decision_checks(self):
        """Foreground selection (the sampler's per-class score thresholds and budgets on ``sigmoid(seg_logits)``);
        box decisions: ``score_thr`` and the ``max_boxes`` budget in the graph, NMS IoU / order and the
        ``pre_max`` / ``post_max`` budgets after it."""
        sampler, head = self.model.fg_sampler, self.model.bbox_head.test_cfg
        budgets = [min(b, int(m)) for b, m in zip(sampler.max_per_class, self.model.bounds['max_fg_points'])]
        foreground = SelectionDecision(
            'foreground', lambda outputs, pre: outputs['seg_logits'][:pre.context['num_points']].double().sigmoid(),
            lambda pre: pre.inputs['batch'][:pre.context['num_points']], sampler.score_thresholds, budgets,
            FOREGROUND_DOWNSTREAM)
        boxes = [ScoreThreshold(head['score_thr']), RankCutoff(self.model.bounds['max_boxes'], 'max_boxes'),
                 NmsOverlap(head['nms_iou_thr'])]
        boxes += [RankCutoff(head[k], k) for k in ('pre_max', 'post_max') if head.get(k)]
        return DecisionChecks((foreground,), tuple(boxes))

    def graph_detections(self, outputs, side):
        """The ``num_boxes`` boxes of the graph (before NMS)."""
        n = int(outputs['num_boxes'])
        return detections_of(outputs['boxes'][:n], outputs['scores'][:n], outputs['labels'][:n],
                             outputs['box_batch'][:n], side)

    def result_detections(self, results, side):
        """The boxes of the data samples (after NMS)."""
        return detections_of_samples(results, side)

    def compare_results(self, deployed, reference):
        """:func:`~fsdlite.deploy.compare.match_detections` within :data:`TOLERANCE`."""
        return match_detections(deployed, reference, atol=TOLERANCE)


__all__ = ['DetectorGraph', 'DetectorAdapter']
