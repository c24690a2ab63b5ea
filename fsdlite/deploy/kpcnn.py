"""Deploy adapter of KPCNN (kernel-point classification): the KPFCNN pre-ops, the encoder and a fixed-shape global
average + head inside the graph.

Outside the graph: the same padded pyramid as :class:`~fsdlite.deploy.kpconv.KPFCNNAdapter` (no upsampling
indices: KPCNN has no decoder) plus ``batch_last``, the sample of every last-level point (B for padding, the dump
slot of the average).  Inside: the encoder (pure-torch kernel-point formulation while exporting), the per-sample
mean of the last level (``static_segment_reduce``: no ``bincount``, whose size depends on the data) and the head.
After the graph: softmax, label per sample.
"""
import torch

from ..models.kpconv.data_preprocessor import KPPyramid
from ..models.layers.static_ops import static_segment_reduce
from ..registry import DEPLOY_ADAPTERS
from ..structures import Det3DDataSample
from .adapter import GraphModule, PreOpsResult
from .compare import match_class_labels, tensor_diff
from .kpconv import TOLERANCE, KPFCNNAdapter


class KPCNNGraph(GraphModule):
    """``forward(features, *points (L), *neighbors (L), *pools (L-1), batch_last)`` -> ``(logits (B, classes),)``."""

    def __init__(self, model, levels, batch_size):
        super().__init__(model)
        self.levels, self.batch_size = int(levels), int(batch_size)

    def forward(self, features, *flat):
        """Encoder on the padded pyramid, per-sample mean of the last level, head: ``(logits (B, classes),)``."""
        n = self.levels
        points, neighbors, pools = list(flat[:n]), list(flat[n:2 * n]), list(flat[2 * n:3 * n - 1])
        batch_last = flat[-1]
        pyramid = KPPyramid(points=points, batch=[None] * n, neighbors=neighbors, pools=pools, upsamples=[],
                            features=features, batch_size=self.batch_size, cells=None, num_points=[])
        last = self.model.backbone(pyramid)[-1]
        pooled = static_segment_reduce(last, batch_last, self.batch_size, 'mean')  # padding rows -> dump slot B
        return (self.model.head(pooled),)


@DEPLOY_ADAPTERS.register_module('KPCNN')
class KPCNNAdapter(KPFCNNAdapter):
    """KPCNN; ``bounds`` = ``dict(max_points=[N_0, ..., N_{L-1}])`` points per pyramid level (whole batch).

    Raw data: a list of B point clouds (N_i, 3 + F).  Results: data samples with ``pred_label`` and
    ``pred_scores`` (classes,), as ``KPCNN.predict``.  Last-level points beyond the bound are left out of the
    average (counted in ``dropped``).
    """

    def input_meanings(self):
        """The KPFCNN inputs without ``upsamples_l*``, plus ``batch_last``."""
        meanings = {k: v for k, v in super().input_meanings().items() if not k.startswith('upsamples_')}
        last = self.bounds['max_points'][-1]
        meanings['batch_last'] = (f'({last},) int64 sample of each level-{self.levels - 1} point, '
                                  f'{self.batch_size} (dump) for padding')
        return meanings

    def output_meanings(self):
        """``logits`` (B, classes) per sample."""
        return {'logits': f'({self.batch_size}, {self.model.num_classes}) float32 class logits per sample'}

    def graph_module(self):
        """A :class:`KPCNNGraph`."""
        return KPCNNGraph(self.model, self.levels, self.batch_size)

    def outside_graph(self):
        """Padded pyramid and last-level sample ids before; softmax and argmax after."""
        return dict(
            pre_ops=['KPDataPreprocessor pyramid: grid_subsample per level, Morton order, radius_neighbors for '
                     'neighbours / pools cut to the calibrated limits (fsdlite.ops)',
                     'pad every level to max_points[l]; shadow index = the bound (overflow truncated and counted); '
                     'sample of each last-level point (dump = B)'],
            post_ops=['softmax; label = argmax per sample'])

    def pre_ops(self, data):
        """The padded pyramid without upsampling indices, plus ``batch_last`` (max_points[-1],) (dump = B)."""
        pyr, inputs, kept, dropped = self.padded_pyramid(data)
        inputs = {k: v for k, v in inputs.items() if not k.startswith('upsamples_')}
        last, cap = self.levels - 1, self.bounds['max_points'][-1]
        batch = torch.full((cap,), self.batch_size, dtype=torch.long)
        batch[:kept[last]] = pyr.batch[last][:kept[last]]
        inputs['batch_last'] = batch
        return PreOpsResult(inputs, dict(num_valid=kept[0]), dropped)

    def post_ops(self, outputs, pre):
        """One data sample per batch entry with ``pred_scores`` (classes,) (softmax) and ``pred_label``."""
        scores = torch.softmax(outputs['logits'].float(), 1)
        samples = [Det3DDataSample() for _ in range(self.batch_size)]
        for sample, score in zip(samples, scores):
            sample.pred_scores = score
            sample.pred_label = score.argmax()
        return samples

    def compare_outputs(self, deployed, reference, pre):
        """``logits`` (B, classes) within :data:`TOLERANCE`."""
        return [tensor_diff('logits', deployed['logits'], reference['logits'], TOLERANCE)]

    def compare_results(self, deployed, reference):
        """:func:`~fsdlite.deploy.compare.match_class_labels` within :data:`TOLERANCE`."""
        return match_class_labels(deployed, reference, atol=TOLERANCE)


__all__ = ['KPCNNGraph', 'KPCNNAdapter']
