"""Deploy adapter of VoxelNet (muon tomography): the whole network is one fixed-shape graph.

The input is already fixed-shape, ``(B, V, M, 9)`` muon features and ``(B, V, 3)`` voxel centres, so nothing
runs before the graph except stacking and checks.  Inside the graph the kNN of every GravNet layer in its
learned latent space stays a fixed-size TopK over each chunk of graphs (the efficient implementation's
chunks; ``GravNetLayer`` switches from ``fsdlite.ops.knn`` to the TopK form while exporting).  After the graph:
class probabilities / labels (or X0) per voxel.
"""
import torch

from ..registry import DEPLOY_ADAPTERS
from ..structures import Det3DDataSample, PointData
from .adapter import DeployAdapter, Frame, GraphModule, PreOpsResult
from .compare import Match, match_point_labels, tensor_diff
from .frames import dataset_batches

TOLERANCE = 1e-4


class VoxelNetGraph(GraphModule):
    """``forward(muon_features (B, V, M, F), voxel_centres (B, V, 3))`` -> ``(head output,)``."""

    def forward(self, muon_features, voxel_centres):
        """The model's ``mode='tensor'`` output: log-probabilities (B, V, C) or log X0 (B, V)."""
        return (self.model(dict(muon_features=muon_features, voxel_centres=voxel_centres), mode='tensor'),)


def collate_volumes(items):
    """Stack dataset items into ``dict(muon_features (B, V, M, F), voxel_centres (B, V, 3))``."""
    return {k: torch.stack([it['inputs'][k] for it in items]) for k in ('muon_features', 'voxel_centres')}


@DEPLOY_ADAPTERS.register_module('VoxelNet')
class VoxelNetAdapter(DeployAdapter):
    """VoxelNet; ``bounds`` = ``dict(num_voxels=V, num_muons=M)`` (the fixed input shape with ``batch_size``).

    Raw data: ``dict(muon_features (B, V, M, F), voxel_centres (B, V, 3))``.  Results: data samples with
    ``pred_pts_seg`` as ``VoxelNet.predict`` (``pts_semantic_mask`` and ``pts_scores``, or ``log_x0``).
    """

    family = 'voxelnet'
    bounds_have_margin = False

    def __init__(self, model, bounds, batch_size=1):
        super().__init__(model, bounds, batch_size)
        for key in ('num_voxels', 'num_muons'):
            if not isinstance(self.bounds.get(key), int) or self.bounds[key] < 1:
                raise ValueError(f'VoxelNet deploy bounds need a positive int {key}, got {self.bounds.get(key)!r}')
        self.output_name = 'log_probs' if hasattr(model.head, 'num_classes') else 'log_x0'

    @classmethod
    def measure_bounds(cls, model, frames, margin):
        """The input shape of the frames (all must agree: VoxelNet has no padding of muons or voxels)."""
        shapes = {tuple(f.data['muon_features'].shape[1:3]) for f in frames}
        if len(shapes) != 1:
            raise ValueError(f'VoxelNet frames have different (V, M) shapes {sorted(shapes)}; pass --bounds')
        v, m = shapes.pop()
        return dict(num_voxels=int(v), num_muons=int(m))

    @classmethod
    def frames(cls, cfg, model, batch_size, data_root=None):
        """Two batches of the config's test/val dataset (simulated volumes, deterministic)."""
        return [Frame(name, collate_volumes(items), source) for name, items, source in dataset_batches(cfg, batch_size)]

    def shape(self):
        """The fixed input shape ``(B, V, M, F)`` of ``muon_features``."""
        return (self.batch_size, self.bounds['num_voxels'], self.bounds['num_muons'],
                self.model.input_norm.num_features)

    def input_meanings(self):
        """``muon_features`` (B, V, M, F) and ``voxel_centres`` (B, V, 3)."""
        b, v, m, f = self.shape()
        return {'muon_features': f'({b}, {v}, {m}, {f}) float32 features of M muons per voxel',
                'voxel_centres': f'({b}, {v}, 3) float32 voxel centres (m)'}

    def output_meanings(self):
        """``log_probs`` (B, V, classes) or ``log_x0`` (B, V), depending on the head."""
        b, v = self.shape()[:2]
        if self.output_name == 'log_probs':
            return {'log_probs': f'({b}, {v}, {self.model.head.num_classes}) float32 class log-probabilities per voxel'}
        return {'log_x0': f'({b}, {v}) float32 predicted log X0 (m) per voxel'}

    def graph_module(self):
        """A :class:`VoxelNetGraph`."""
        return VoxelNetGraph(self.model)

    def outside_graph(self):
        """Stacking and checks before; the head's ``predict`` after."""
        return dict(pre_ops=['stack volumes into (B, V, M, F) / (B, V, 3); check shape and finiteness'],
                    post_ops=['per-voxel class argmax and probabilities (or log X0), as VoxelNet.predict'])

    def pre_ops(self, data):
        """Preprocessed float32 inputs, no context, no drops.

        Raises:
            ValueError: the shape differs from :meth:`shape` or a value is not finite.
        """
        inputs = self.model.data_preprocessor(dict(inputs=dict(data)), False)['inputs']
        feats, centres = inputs['muon_features'].float(), inputs['voxel_centres'].float()
        expected = self.shape()
        if tuple(feats.shape) != expected or tuple(centres.shape) != expected[:2] + (3,):
            raise ValueError(f'the deployed VoxelNet graph takes muon_features of shape {expected} and voxel_centres '
                             f'{expected[:2] + (3,)}, got {tuple(feats.shape)} and {tuple(centres.shape)}')
        for name, t in (('muon_features', feats), ('voxel_centres', centres)):
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                raise ValueError(f'{name} contains {bad} non-finite values (NaN/Inf); repair or drop those muons')
        return PreOpsResult(dict(muon_features=feats.contiguous(), voxel_centres=centres.contiguous()), None, {})

    def _samples(self, output):
        samples = [Det3DDataSample() for _ in range(output.shape[0])]
        for sample, pred in zip(samples, self.model.head.predict(output)):
            sample.pred_pts_seg = PointData(**pred)
        return samples

    def post_ops(self, outputs, pre):
        """Data samples with ``pred_pts_seg`` from ``model.head.predict`` of the graph output."""
        return self._samples(outputs[self.output_name])

    def reference(self, data):
        """The model's eager forward (its configured impl, e.g. fsdlite.ops kNN) and head.predict."""
        inputs = self.model.data_preprocessor(dict(inputs=dict(data)), False)['inputs']
        with torch.no_grad():
            return self._samples(self.model(inputs, mode='tensor'))

    def compare_outputs(self, deployed, reference, pre):
        """The single output within :data:`TOLERANCE`."""
        return [tensor_diff(self.output_name, deployed[self.output_name], reference[self.output_name], TOLERANCE)]

    def compare_results(self, deployed, reference):
        """Per-voxel labels (:func:`match_point_labels`) or the largest log X0 difference, within :data:`TOLERANCE`."""
        if self.output_name == 'log_probs':
            return match_point_labels(deployed, reference, atol=TOLERANCE)
        diff = max(tensor_diff('log_x0', a.pred_pts_seg.log_x0, b.pred_pts_seg.log_x0).max_abs
                   for a, b in zip(deployed, reference))
        return Match(diff <= TOLERANCE, f'max log X0 diff {diff:.2e} (atol {TOLERANCE:g})')


__all__ = ['VoxelNetGraph', 'VoxelNetAdapter']
