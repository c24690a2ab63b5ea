"""Deploy adapter of KPFCNN (kernel-point segmentation): neighbour search outside, the network inside the graph.

Outside the graph (eager, ``fsdlite.ops``): the data preprocessor's pyramid (``grid_subsample`` per level,
``radius_neighbors`` neighbourhoods / pooling / upsampling indices cut to the calibrated limits H_l), padded to
the per-level bounds ``max_points[l]`` with the shadow index moved to the bound (a shadow row is zero);
after the graph: softmax, projection of level-0 scores to every input point, per-sample split.  Inside: the
encoder, decoder and head on the padded pyramid, with the kernel-point layers' ONNX formulation
(in the fixed execution mode: the math of the ``fsdlite.ops.kpconv`` / ``kp_aggregate`` references with Gather, one GEMM
for the kernel-point distances and MatMul contractions, see ``fsdlite.models.kpconv.export_forms``) while
exporting.
"""
import torch

from ..models.kpconv.data_preprocessor import KPPyramid
from ..registry import DEPLOY_ADAPTERS
from ..structures import Det3DDataSample, PointData
from .adapter import DeployAdapter, Frame, GraphModule, PreOpsResult
from .bounds_io import with_margin
from .compare import match_point_labels, tensor_diff
from .frames import dataset_batches

TOLERANCE = 1e-4


def input_names(levels):
    """Graph input names of an L-level pyramid, in order."""
    return (['features'] + [f'points_l{l}' for l in range(levels)] + [f'neighbors_l{l}' for l in range(levels)]
            + [f'pools_l{l}' for l in range(levels - 1)] + [f'upsamples_l{l}' for l in range(levels - 1)])


class KPFCNNGraph(GraphModule):
    """``forward(features, *points, *neighbors, *pools, *upsamples)`` (see :func:`input_names`) -> ``(logits,)``
    (N_0 max, C) for the padded level-0 points."""

    def __init__(self, model, levels):
        super().__init__(model)
        self.levels = int(levels)

    def forward(self, features, *flat):
        """``(self.model.logits(pyramid),)`` on the pyramid rebuilt from the flat inputs."""
        n = self.levels
        points, neighbors = list(flat[:n]), list(flat[n:2 * n])
        pools, upsamples = list(flat[2 * n:3 * n - 1]), list(flat[3 * n - 1:])
        pyramid = KPPyramid(points=points, batch=[None] * n, neighbors=neighbors, pools=pools, upsamples=upsamples,
                            features=features, batch_size=1, cells=None, num_points=[])
        return (self.model.logits(pyramid),)


def pad_index(index, valid_rows, rows, width, bound_in, kept_in):
    """Pad an (n, h) index tensor of a pyramid level to (rows, width).

    Entries ``>= kept_in`` (the source level's shadow, or its rows truncated away) become the padded shadow
    ``bound_in``; rows ``>= valid_rows`` are cut, missing rows and columns are shadows.
    """
    src = index[:valid_rows, :width]
    out = torch.empty((rows, width), dtype=torch.long, device=index.device)
    out[src.shape[0]:].fill_(bound_in)
    out[:src.shape[0], src.shape[1]:].fill_(bound_in)
    shadow = torch.tensor(bound_in, dtype=torch.long, device=index.device)
    torch.where(src < kept_in, src, shadow, out=out[:src.shape[0], :src.shape[1]])  # one pass, no temporaries
    return out


@DEPLOY_ADAPTERS.register_module('KPFCNN')
class KPFCNNAdapter(DeployAdapter):
    """KPFCNN; ``bounds`` = ``dict(max_points=[N_0, ..., N_{L-1}])`` points per pyramid level (whole batch).

    Raw data: a list of B point clouds (N_i, 3 + F).  Results: data samples with ``pred_pts_seg``
    (``pts_semantic_mask`` (N_i,), ``pts_scores`` (N_i, C)) for every input point, as ``KPFCNN.predict``.
    """

    family = 'kpconv'

    def __init__(self, model, bounds, batch_size=1):
        super().__init__(model, bounds, batch_size)
        self.levels = int(model.backbone.num_levels)
        caps = self.bounds.get('max_points')
        if not isinstance(caps, (list, tuple)) or len(caps) != self.levels or min(caps) < 1:
            raise ValueError(f'{type(model).__name__} deploy bounds need max_points = one positive int per level '
                             f'({self.levels}), got {caps!r}')
        self.bounds['max_points'] = [int(c) for c in caps]

    @classmethod
    def measure_bounds(cls, model, frames, margin):
        """Points per level of the frames' pyramids (maximum) times ``margin``."""
        levels = model.backbone.num_levels
        most = [0] * levels
        with torch.no_grad():
            for frame in frames:
                pyramid = model.data_preprocessor(dict(inputs=dict(points=list(frame.data))), False)['inputs']
                most = [max(m, int(p.shape[0])) for m, p in zip(most, pyramid.points[:levels])]
        return with_margin(dict(max_points=most), margin)

    @classmethod
    def frames(cls, cfg, model, batch_size, data_root=None):
        """Two batches of the config's test/val dataset (synthetic scenes or S3DIS tiles)."""
        return [Frame(name, [it['inputs']['points'] for it in items], source)
                for name, items, source in dataset_batches(cfg, batch_size)]

    def limits(self):
        """Calibrated neighbour limits H_l per level (list of int); raises when not calibrated."""
        limits = [int(v) for v in self.model.data_preprocessor.neighbor_limits.tolist()]
        if min(limits) < 1:
            raise RuntimeError('KPFCNN neighbour limits are not calibrated yet: run the data preprocessor on a batch '
                               '(the exporter does) or load a trained checkpoint')
        return limits

    def host_state(self):
        """``dict(neighbor_limits=[H_0, ..., H_{L-1}])`` (:meth:`limits`)."""
        return dict(neighbor_limits=self.limits())

    def load_host_state(self, state):
        """Copy ``state['neighbor_limits']`` (when present) into the data preprocessor."""
        limits = state.get('neighbor_limits')
        if limits is not None:
            self.model.data_preprocessor.neighbor_limits.copy_(torch.tensor(limits, dtype=torch.long))

    def input_meanings(self):
        """``features``, then per level ``points_l*``, ``neighbors_l*``, ``pools_l*``, ``upsamples_l*``."""
        caps, limits = self.bounds['max_points'], self.limits()
        feats = self.model.backbone.in_channels
        out = {'features': f'({caps[0]}, {feats}) float32 level-0 input features (padding rows 0)'}
        for l in range(self.levels):
            out[f'points_l{l}'] = f'({caps[l]}, 3) float32 level-{l} points (padding rows 0)'
        for l in range(self.levels):
            out[f'neighbors_l{l}'] = (f'({caps[l]}, {limits[l]}) int64 level-{l} neighbours within the conv radius, '
                                      f'shadow {caps[l]}')
        for l in range(self.levels - 1):
            out[f'pools_l{l}'] = (f'({caps[l + 1]}, {limits[l]}) int64 level-{l} neighbours of the level-{l + 1} '
                                  f'points, shadow {caps[l]}')
        for l in range(self.levels - 1):
            out[f'upsamples_l{l}'] = (f'({caps[l]}, 1) int64 closest level-{l + 1} point of each level-{l} point, '
                                      f'shadow {caps[l + 1]}')
        return out

    def output_meanings(self):
        """``logits`` (max_points[0], classes) of the padded level-0 points."""
        return {'logits': f'({self.bounds["max_points"][0]}, {self.model.num_classes}) float32 class logits of the '
                          'level-0 points (rows >= the valid level-0 count are padding)'}

    def graph_module(self):
        """A :class:`KPFCNNGraph`."""
        return KPFCNNGraph(self.model, self.levels)

    def outside_graph(self):
        """Padded neighbour pyramid before; softmax, projection to the input points and split after."""
        return dict(
            pre_ops=['KPDataPreprocessor pyramid: grid_subsample per level, Morton order, radius_neighbors for '
                     'neighbours / pools / upsamples cut to the calibrated limits (fsdlite.ops)',
                     'pad every level to max_points[l]; shadow index = the bound (overflow truncated and counted)'],
            post_ops=['softmax; level-0 scores projected to every input point (cells); per-sample split'])

    def padded_pyramid(self, data):
        """The data preprocessor's pyramid of a batch, padded to the bounds.

        Returns:
            tuple: ``(pyramid, inputs, kept, dropped)``: the unpadded KPPyramid, dict of graph inputs in
            :func:`input_names` order, valid rows kept per level, and ``max_points[l] -> rows dropped``.
        """
        clouds = list(data)
        if len(clouds) != self.batch_size:
            raise ValueError(f'the deployed graph takes batches of {self.batch_size} point clouds, got {len(clouds)}')
        with torch.no_grad():
            pyr = self.model.data_preprocessor(dict(inputs=dict(points=clouds)), False)['inputs']
        caps, limits = self.bounds['max_points'], self.limits()
        sizes = [int(p.shape[0]) for p in pyr.points[:self.levels]]
        kept = [min(n, c) for n, c in zip(sizes, caps)]
        dropped = {f'max_points[{l}]': n - k for l, (n, k) in enumerate(zip(sizes, kept))}
        feats = pyr.features.new_zeros((caps[0], pyr.features.shape[1]))
        feats[:kept[0]] = pyr.features[:kept[0]]
        inputs = {'features': feats.float()}
        for l in range(self.levels):
            pts = pyr.points[l].new_zeros((caps[l], 3))
            pts[:kept[l]] = pyr.points[l][:kept[l]]
            inputs[f'points_l{l}'] = pts.float()
        for l in range(self.levels):
            inputs[f'neighbors_l{l}'] = pad_index(pyr.neighbors[l], kept[l], caps[l], limits[l], caps[l], kept[l])
        for l in range(self.levels - 1):
            inputs[f'pools_l{l}'] = pad_index(pyr.pools[l], kept[l + 1], caps[l + 1], limits[l], caps[l], kept[l])
        for l in range(self.levels - 1):
            inputs[f'upsamples_l{l}'] = pad_index(pyr.upsamples[l], kept[l], caps[l], 1, caps[l + 1], kept[l + 1])
        return pyr, inputs, kept, dropped

    def pre_ops(self, data):
        """Inputs of :meth:`padded_pyramid`; context ``cells``, ``num_points`` (per sample) and ``num_valid``."""
        pyr, inputs, kept, dropped = self.padded_pyramid(data)
        context = dict(cells=pyr.cells, num_points=list(pyr.num_points), num_valid=kept[0])
        return PreOpsResult(inputs, context, dropped)

    def post_ops(self, outputs, pre):
        """Per sample ``pred_pts_seg`` with ``pts_scores`` (N_i, C) and ``pts_semantic_mask`` (N_i,) for every
        input point (points of level-0 cells beyond the bound get uniform scores)."""
        ctx = pre.context
        logits = outputs['logits'][:ctx['num_valid']]
        probs = torch.softmax(logits.float(), 1)
        uniform = probs.new_full((1, probs.shape[1]), 1.0 / probs.shape[1])  # level-0 rows beyond the bound
        scores = torch.cat([probs, uniform]).index_select(0, ctx['cells'].clamp(max=ctx['num_valid']))
        samples = [Det3DDataSample() for _ in range(self.batch_size)]
        for sample, score in zip(samples, scores.split(ctx['num_points'])):
            sample.pred_pts_seg = PointData(pts_semantic_mask=score.argmax(1), pts_scores=score)
        return samples

    def reference(self, data):
        """The model's eager ``predict`` (unpadded pyramid, its configured kernels)."""
        with torch.no_grad():
            pyr = self.model.data_preprocessor(dict(inputs=dict(points=list(data))), False)['inputs']
            return self.model(pyr, mode='predict')

    def compare_outputs(self, deployed, reference, pre):
        """``logits`` on the valid level-0 rows within :data:`TOLERANCE`."""
        n = pre.context['num_valid']
        return [tensor_diff('logits', deployed['logits'][:n], reference['logits'][:n], TOLERANCE, 'valid level-0 rows')]

    def compare_results(self, deployed, reference):
        """:func:`~fsdlite.deploy.compare.match_point_labels` within :data:`TOLERANCE`."""
        return match_point_labels(deployed, reference, atol=TOLERANCE)


__all__ = ['input_names', 'KPFCNNGraph', 'pad_index', 'KPFCNNAdapter']
