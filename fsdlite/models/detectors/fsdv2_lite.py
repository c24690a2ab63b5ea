"""FSDv2-lite: virtual voxels instead of connected components.

segmentor -> VoteSegHead -> foreground sampling -> voted centres become virtual points ->
real + virtual points voxelized together at the virtual voxel size and encoded by a dynamic VFE
-> VirtualVoxelMixer (sparse UNet) -> one box per voxel that holds virtual points, relative to the
mean of its virtual points -> rotated BEV NMS.
"""
import torch

from fsdlite import ops

from ...registry import MODELS
from ..fsd.indexing import mask_to_index
from ..layers.builder import build_module
from .base import Instances, SparseDetectorBase


@MODELS.register_module()
class FSDv2Lite(SparseDetectorBase):
    """FSDv2-lite detector (see the module docstring).

    Args:
        virtual_encoder (dict): ``VirtualPointEncoder`` config (``in_channels``, ``num_classes`` and
            ``raw_channels`` are filled in).
        virtual_vfe (dict): ``DynamicVFE`` config over the virtual voxel grid: its ``voxel_size`` (required)
            and ``point_range`` (default: the model's) define the virtual voxels; ``in_channels`` filled in.
        mixer (dict): ``VirtualVoxelMixer`` config (``in_channels`` and the virtual grid filled in).
        **kwargs: see :class:`~fsdlite.models.detectors.base.SparseDetectorBase`.
    """

    def __init__(self, voxel_encoder, backbone, neck, seg_head, fg_sampler, virtual_encoder, virtual_vfe, mixer,
                 bbox_head, data_preprocessor=None, voxel_size=None, point_range=None, init_cfg=None):
        super().__init__(voxel_encoder, backbone, neck, seg_head, fg_sampler, bbox_head,
                         data_preprocessor=data_preprocessor, voxel_size=voxel_size, point_range=point_range,
                         init_cfg=init_cfg)
        raw = self.voxel_encoder.in_channels - 3
        self.virtual_encoder = build_module(virtual_encoder, in_channels=self.neck.out_channels,
                                            num_classes=self.num_classes, raw_channels=raw)
        if self.virtual_encoder.num_classes != self.num_classes or self.virtual_encoder.raw_channels != raw:
            raise ValueError(f'virtual_encoder: num_classes={self.virtual_encoder.num_classes} and raw_channels='
                             f'{self.virtual_encoder.raw_channels} must match the model ({self.num_classes}, {raw})')
        self.virtual_vfe = build_module(virtual_vfe, in_channels=3 + self.virtual_encoder.out_channels,
                                        point_range=self.point_range)
        grid = dict(voxel_size=self.virtual_vfe.voxel_size, point_range=self.virtual_vfe.point_range)
        self.mixer = build_module(mixer, in_channels=self.virtual_vfe.out_channels, **grid)
        self.build_bbox_head(self.mixer.out_channels)

    def instances(self, inputs, point_feats, seg_outputs, fg):
        """Virtual voxels (voxels holding >= 1 virtual point), mixed; reference = mean of their virtual points."""
        cloud = self.virtual_encoder(point_feats, seg_outputs['seg_logits'], inputs['points'], inputs['batch'], fg)
        vox = ops.voxelize(cloud.xyz.detach(), self.virtual_vfe.voxel_size, self.virtual_vfe.point_range,
                       batch=cloud.batch)
        inside = vox.point2voxel >= 0  # points outside a smaller virtual grid are left out (counted)
        included = mask_to_index(inside)
        point2voxel = vox.point2voxel[included]
        xyz = cloud.xyz[included]
        num_voxels = vox.voxel_coors.shape[0]
        voxel_feats, _ = self.virtual_vfe(torch.cat([xyz, cloud.feats[included]], dim=1), point2voxel, vox.voxel_coors)
        mixed = self.mixer(voxel_feats, vox.voxel_coors, inputs['batch_size'])
        virtual = cloud.is_virtual[included].to(xyz.dtype)
        count = ops.segment_reduce(virtual, point2voxel, num_voxels, 'sum')
        centre_sum = ops.segment_reduce(xyz * virtual[:, None], point2voxel, num_voxels, 'sum')
        keep = mask_to_index(count > 0)
        ref = centre_sum[keep] / count[keep, None]
        outside_virtual = int((~inside & cloud.is_virtual).sum())
        stats = dict(num_virtual_points=fg.point_index.numel(), num_virtual_outside_grid=outside_virtual,
                     num_real_outside_grid=int(cloud.xyz.shape[0] - included.numel()) - outside_virtual)
        return Instances(mixed[keep], ref.detach(), vox.voxel_coors[keep, 0], None, stats)

