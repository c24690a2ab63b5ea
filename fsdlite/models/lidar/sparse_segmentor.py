"""SparseSegmentor: voxelized points -> VFE -> sparse UNet -> voxel-to-point neck -> point seg head."""
import torch
from mmengine.model import BaseModel

from fsdlite.registry import MODELS
from fsdlite.structures import Det3DDataSample, PointData

from .._modes import dispatch_forward
from ..layers.builder import build_module


@MODELS.register_module()
class SparseSegmentor(BaseModel):
    """Point-wise lidar segmentation (FSD's first stage), following mmengine's BaseModel contract.

    The data preprocessor (e.g. :class:`~fsdlite.models.lidar.LidarDataPreprocessor`)
    produces ``inputs`` with ``points`` (P, C), ``batch``, ``point_index``, ``num_points``,
    ``voxel_coors`` (V, 4), ``point2voxel``, ``voxel_counts`` and ``batch_size``.

    Parts are built with shared defaults (:func:`~fsdlite.models.layers.builder.build_module`): the voxel
    grid (``voxel_size``, ``point_range``) goes to every part that takes it, and each part's
    ``in_channels`` defaults to the previous part's ``out_channels``, so a config states the grid once
    and slimming only edits channel tuples.

    Args:
        voxel_encoder (dict): e.g. ``DynamicVFE``; called ``(points, point2voxel, voxel_coors)``.
        backbone (dict): e.g. ``SparseUNet``; called ``(voxel_feats, voxel_coors, batch_size)``.
        neck (dict): e.g. ``Voxel2PointNeck``; called ``(voxel_feats, points, point2voxel, voxel_coors)``.
        seg_head (dict): e.g. ``PointSegHead`` (``forward`` / ``get_targets`` / ``loss`` / ``predict``).
        data_preprocessor (dict | None): preprocessor config.
        voxel_size (Sequence[float] | None): shared ``(vx, vy, vz)``.
        point_range (Sequence[float] | None): shared ``(x_min, y_min, z_min, x_max, y_max, z_max)``.
        init_cfg (dict | None): mmengine init config.
    """

    def __init__(self, voxel_encoder, backbone, neck, seg_head, data_preprocessor=None, voxel_size=None,
                 point_range=None, init_cfg=None):
        grid = {k: v for k, v in (('voxel_size', voxel_size), ('point_range', point_range)) if v is not None}
        if data_preprocessor is not None:  # built in fsdlite's scope (BaseModel would use mmengine's root)
            data_preprocessor = build_module(data_preprocessor, **grid)
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        self.voxel_encoder = build_module(voxel_encoder, **grid)
        self.backbone = build_module(backbone, in_channels=self.voxel_encoder.out_channels, **grid)
        self.neck = build_module(neck, in_channels=self.backbone.out_channels, **grid)
        self.seg_head = build_module(seg_head, in_channels=self.neck.out_channels, **grid)
        self.num_classes = self.seg_head.num_classes

    def extract_feat(self, inputs):
        """(P, C_neck) point features of the kept points (requires V >= 1): VFE -> sparse UNet -> neck.

        A fixed-shape run (padded ``points`` / ``point2voxel`` / ``voxel_coors`` with dump slots, in the fixed
        execution mode of :mod:`~fsdlite.models.layers.execution`) also gives ``inputs['kernel_maps']``, the padded
        kernel maps of the UNet's convs.
        """
        voxel_feats, _ = self.voxel_encoder(inputs['points'], inputs['point2voxel'], inputs['voxel_coors'])
        voxel_feats = self.backbone(voxel_feats, inputs['voxel_coors'], inputs['batch_size'],
                                    kernel_maps=inputs.get('kernel_maps'))
        return self.neck(voxel_feats, inputs['points'], inputs['point2voxel'], inputs['voxel_coors'])

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """Dispatch on ``mode``.

        Returns:
            'loss': dict of scalar losses; 'predict': the data samples with ``pred_pts_seg``
            (``pts_semantic_mask`` (N_i,) int64, C = background; ``pts_scores`` (N_i, C)) for every input
            point (excluded points are background with score 0); 'tensor': the head outputs dict
            (``seg_logits`` (P, C) ...) of the kept points, or None when there are none.
        """
        return dispatch_forward(self, inputs, data_samples, mode, self._head_outputs)

    def _head_outputs(self, inputs):
        if inputs['voxel_coors'].shape[0] == 0:
            return None
        return self.seg_head(self.extract_feat(inputs))

    def point_labels(self, inputs, data_samples):
        """(P,) ground-truth labels of the kept points from ``gt_pts_seg.pts_semantic_mask``."""
        if data_samples is None:
            raise ValueError("mode='loss' needs data_samples with gt_pts_seg.pts_semantic_mask")
        masks = []
        for i, (sample, n) in enumerate(zip(data_samples, inputs['num_points'].tolist())):
            if 'gt_pts_seg' not in sample or 'pts_semantic_mask' not in sample.gt_pts_seg:
                raise KeyError(f'data_samples[{i}] has no gt_pts_seg.pts_semantic_mask')
            mask = torch.as_tensor(sample.gt_pts_seg.pts_semantic_mask, device=inputs['points'].device)
            if mask.shape != (n,):
                raise ValueError(f'data_samples[{i}].gt_pts_seg.pts_semantic_mask has shape {tuple(mask.shape)}, '
                                 f'expected ({n},): one label per input point')
            masks.append(mask.long())
        return torch.cat(masks).index_select(0, inputs['point_index'])

    def loss(self, inputs, data_samples):
        """Segmentation losses; a batch without any voxel gives zero losses (graph kept for DDP)."""
        labels = self.point_labels(inputs, data_samples)
        outputs = self._head_outputs(inputs)
        if outputs is None:
            zero = sum(p.sum() for p in self.parameters()) * 0.0
            return dict(loss_seg=zero)
        targets = self.seg_head.get_targets(labels, points=inputs['points'], batch=inputs['batch'],
                                            data_samples=data_samples)
        return self.seg_head.loss(outputs, targets)

    def predict(self, inputs, data_samples=None):
        """Predict every input point's class; returns the data samples with ``pred_pts_seg`` filled."""
        sizes = inputs['num_points'].tolist()
        total = sum(sizes)
        device = inputs['points'].device
        labels = torch.full((total,), self.num_classes, dtype=torch.long, device=device)
        scores = torch.zeros(total, self.num_classes, device=device)
        outputs = self._head_outputs(inputs)
        if outputs is not None:
            pred = self.seg_head.predict(outputs)
            labels[inputs['point_index']] = pred['labels']
            scores[inputs['point_index']] = pred['scores'].to(scores.dtype)
        if data_samples is None:
            data_samples = [Det3DDataSample() for _ in sizes]
        for sample, mask, score in zip(data_samples, labels.split(sizes), scores.split(sizes)):
            sample.pred_pts_seg = PointData(pts_semantic_mask=mask, pts_scores=score)
        return data_samples


__all__ = ['SparseSegmentor']
