"""FSD-lite: FSD v1's fully sparse chain with a light second stage in place of its RCNN.

segmentor (VFE -> SparseUNet -> neck) -> VoteSegHead -> foreground sampling -> grouping of voted
centres (class-wise voxels + connected components) -> SIR over each cluster's points ->
ClusterHead (one box per cluster, relative to the cluster's mean voted centre) -> optional BoxRefiner (each
box re-estimated from the points around it) -> rotated BEV NMS.
"""
import torch

from ...registry import MODELS
from ...structures.bound_schema import BoundSpec
from ..layers.builder import build_module
from ..layers.execution import execution_mode, gather, segment_reduce
from .detector_base import Instances, SparseDetectorBase, build_task_util
from .indexing import mask_to_index


@MODELS.register_module()
class FSDLite(SparseDetectorBase):
    """FSD-lite detector (see the module docstring).

    Args:
        cluster_assigner (dict): a ``ClusterAssigner`` config (TASK_UTILS; ``num_classes`` and ``point_range``
            come from the model).
        sir (dict): a ``SIR`` config; ``in_channels`` defaults to the SIR input width
            (neck channels + point features beyond xyz + 3 for the vote offset).
        bounds: of the fixed-shape forward (see :mod:`~fsdlite.models.fsd.static`); besides the common
            bounds FSD-lite needs ``max_clusters`` and ``max_cc_iters`` (iterations of the label propagation
            that replaces connected components).
        **kwargs: see :class:`~fsdlite.models.fsd.detector_base.SparseDetectorBase`.
    SIR input per foreground point: ``[neck feature, raw point features (C - 3), voted centre - point]``.
    """

    def __init__(self, voxel_encoder, backbone, neck, seg_head, fg_sampler, cluster_assigner, sir, bbox_head,
                 data_preprocessor=None, voxel_size=None, point_range=None, bounds=None,
                 refiner=None, init_cfg=None):
        super().__init__(voxel_encoder, backbone, neck, seg_head, fg_sampler, bbox_head,
                         data_preprocessor=data_preprocessor, voxel_size=voxel_size, point_range=point_range,
                         refiner=refiner, init_cfg=init_cfg)
        self.cluster_assigner = build_task_util('cluster_assigner', cluster_assigner, num_classes=self.num_classes,
                                                point_range=self.point_range)
        sir_in = self.neck.out_channels + self.voxel_encoder.in_channels - 3 + 3
        self.sir = build_module(sir, in_channels=sir_in)
        self.build_bbox_head(self.sir.out_channels)
        self._init_static(bounds)

    def instance_bounds(self):
        """``max_clusters`` and ``max_cc_iters`` (iterations of the label propagation), one int each."""
        return BoundSpec('max_clusters'), BoundSpec('max_cc_iters')

    def instances(self, inputs, point_feats, seg_outputs, fg):
        """Clusters of voted centres encoded by SIR; reference point = mean voted centre of the cluster.

        The cluster assigner groups the centres; in the fixed execution mode on its bounded backend
        (``max_clusters`` slots, ``max_cc_iters`` rounds of label propagation), whose dump slot then takes the
        centres of near-empty cells, which the dynamic run leaves out.
        """
        bounded = {}
        if execution_mode() == 'fixed':
            bounded = dict(num_valid=fg.num_valid, bounds=(self.bounds['max_clusters'], self.bounds['max_cc_iters']),
                           strict=inputs['strict'])
        clusters = self.cluster_assigner(fg.centre, fg.class_id, fg.batch, inputs['batch_size'], **bounded)
        k = clusters.capacity
        point, cluster, centre = fg.point_index, clusters.point_cluster, fg.centre
        if not bounded:
            keep = mask_to_index(cluster < k)
            point, cluster, centre = (t.index_select(0, keep) for t in (point, cluster, centre))
        cluster_feats, cluster_xyz = self.encode_clusters(inputs['points'], point_feats, point, centre, cluster, k)
        if not bounded:
            stats = dict(num_grouping_dropped=int(clusters.num_near_empty))
            return Instances(cluster_feats, cluster_xyz, clusters.cluster_batch, clusters.cluster_class, stats)
        valid = torch.arange(k, device=cluster_xyz.device) < clusters.num_clusters
        return Instances(cluster_feats, cluster_xyz, clusters.cluster_batch, clusters.cluster_class, {}, valid,
                         clusters.num_clusters, clusters.dropped)

    def encode_clusters(self, points, point_feats, point, centre, cluster, num_clusters):
        """SIR features (K, D) and mean voted centres (K, 3) of K = ``num_clusters`` clusters.

        Args:
            points (Tensor): (N, C) points; point_feats (Tensor): (N, C_neck) their features.
            point (Tensor): (P,) int64 row of each foreground point; centre (Tensor): (P, 3) its voted centre.
            cluster (Tensor): (P,) int64 its cluster (in the fixed execution mode ``K`` is the dump slot).
        """
        cluster_xyz = segment_reduce(centre, cluster, num_clusters, 'mean')
        fg_points = gather(points, point)
        xyz = fg_points[:, :3]
        feats = torch.cat([gather(point_feats, point), fg_points[:, 3:], centre - xyz], dim=1)
        return self.sir(feats, xyz, cluster, num_clusters, cluster_xyz)[0], cluster_xyz
