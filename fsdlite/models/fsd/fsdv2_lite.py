"""FSDv2-lite: virtual voxels instead of connected components.

segmentor -> VoteSegHead -> foreground sampling -> voted centres become virtual points ->
real + virtual points voxelized together at the virtual voxel size and encoded by a dynamic VFE
-> VirtualVoxelMixer (sparse UNet) -> one box per voxel that holds virtual points, relative to the
mean of its virtual points -> rotated BEV NMS.
"""
from typing import NamedTuple, Optional

import torch

from fsdlite import ops

from ...registry import MODELS
from ...structures.bound_schema import BoundSpec
from ..layers.builder import build_module
from ..layers.execution import execution_mode, gather, segment_reduce
from ..layers.static_ops import static_voxelize
from .detector_base import Instances, SparseDetectorBase
from .indexing import mask_to_index, mask_to_padded_index


class VirtualVoxels(NamedTuple):
    """Real + virtual points on the virtual grid: ``xyz`` (P, 3), ``feats`` (P, F), ``is_virtual`` (P,) bool, their
    voxel ``point2voxel`` (P,) (bounded: V = dump) among ``voxel_coors`` (V, 4) ``[b, z, y, x]``; the mixer's
    ``kernel_maps`` (bounded; exact: None, the mixer builds its own); ``stats`` (exact: counts to log) and
    ``dropped`` (bounded: overflow of the instance bounds, else None)."""

    xyz: torch.Tensor
    feats: torch.Tensor
    is_virtual: torch.Tensor
    point2voxel: torch.Tensor
    voxel_coors: torch.Tensor
    kernel_maps: Optional[list]
    stats: dict
    dropped: Optional[torch.Tensor]


def valid_first(num_a, num_b, size_a, size_b):
    """(size_a + size_b,) gather order of ``[a; b]`` (two padded blocks) putting the valid rows first.

    Valid rows of ``a`` (``< num_a``), then valid rows of ``b`` (``< num_b``), then the padding of ``a``, then that
    of ``b``: the order of the dynamic concatenation followed by all padding.
    """
    q = torch.arange(size_a + size_b, device=num_a.device)
    return torch.where(q < num_a, q, torch.where(q < num_a + num_b, q - num_a + size_a,
                                                 torch.where(q < size_a + num_b, q - num_b, q)))


@MODELS.register_module()
class FSDv2Lite(SparseDetectorBase):
    """FSDv2-lite detector (see the module docstring).

    Args:
        virtual_encoder (dict): ``VirtualPointEncoder`` config (``in_channels``, ``num_classes`` and
            ``raw_channels`` are filled in).
        virtual_vfe (dict): ``DynamicVFE`` config over the virtual voxel grid: its ``voxel_size`` (required)
            and ``point_range`` (default: the model's) define the virtual voxels; ``in_channels`` filled in.
        mixer (dict): ``VirtualVoxelMixer`` config (``in_channels`` and the virtual grid filled in).
        bounds: of the fixed-shape forward (see :mod:`~fsdlite.models.fsd.static`); besides the common bounds
            FSDv2-lite needs ``max_virtual_voxels`` (one per mixer level; level 0 = voxels of the virtual grid,
            real and virtual points together). The mixer's rulebooks are built inside the graph
            (:class:`~fsdlite.ops.GraphRulebookOps`).
        **kwargs: see :class:`~fsdlite.models.fsd.detector_base.SparseDetectorBase`.
    """

    def __init__(self, voxel_encoder, backbone, neck, seg_head, fg_sampler, virtual_encoder, virtual_vfe, mixer,
                 bbox_head, data_preprocessor=None, voxel_size=None, point_range=None, bounds=None,
                 refiner=None, init_cfg=None):
        super().__init__(voxel_encoder, backbone, neck, seg_head, fg_sampler, bbox_head,
                         data_preprocessor=data_preprocessor, voxel_size=voxel_size, point_range=point_range,
                         refiner=refiner, init_cfg=init_cfg)
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
        self._init_static(bounds)

    def instance_bounds(self):
        """``max_virtual_voxels`` (one per mixer level) and optional ``max_virtual_pairs`` (one per mixer
        ``pair_slots``: the mixer's in-graph neighbour maps become pair lists).  Both follow the frame's foreground,
        so a capacity tier scales them (the ~2x headroom of the full bounds would make every tier pay for twice the
        mixer work)."""
        return (BoundSpec('max_virtual_voxels', len(self.mixer.encoder), tier_scaled=True, unet='mixer'),
                BoundSpec('max_virtual_pairs', self.mixer.conv_plan().pair_slots(), optional=True, tier_scaled=True,
                          pairs_of='max_virtual_voxels'))

    def instances(self, inputs, point_feats, seg_outputs, fg):
        """Virtual voxels (voxels holding >= 1 virtual point), mixed; reference = mean of their virtual points.

        One pipeline: voxelize the real + virtual points on the virtual grid, encode and mix the voxels, keep those
        holding virtual points.  The voxelization has two backends, as the cluster assigner's grouping: exact
        (:meth:`_exact_voxels`) in the dynamic run, bounded (:meth:`_bounded_voxels`: ``max_virtual_voxels``
        slots, the mixer's maps built in the graph) in the fixed execution mode.
        """
        cloud = self.virtual_encoder(point_feats, seg_outputs['seg_logits'], inputs['points'], inputs['batch'], fg)
        fixed = execution_mode() == 'fixed'
        vox = self._bounded_voxels(inputs, cloud, fg) if fixed else self._exact_voxels(cloud, fg)
        voxel_feats, _ = self.virtual_vfe(torch.cat([vox.xyz, vox.feats], dim=1), vox.point2voxel, vox.voxel_coors)
        mixed = self.mixer(voxel_feats, vox.voxel_coors, inputs['batch_size'], kernel_maps=vox.kernel_maps)
        virtual = vox.is_virtual.to(vox.xyz.dtype)
        num_voxels = vox.voxel_coors.shape[0]
        count = segment_reduce(virtual, vox.point2voxel, num_voxels, 'sum')
        centre_sum = segment_reduce(vox.xyz * virtual[:, None], vox.point2voxel, num_voxels, 'sum')
        if fixed:
            rows, num, _ = mask_to_padded_index(count > 0, num_voxels)
        else:
            rows = mask_to_index(count > 0)
        ref = gather(centre_sum, rows) / gather(count, rows).clamp(min=1)[:, None]
        feats, batch = gather(mixed, rows), gather(vox.voxel_coors[:, 0], rows)
        if not fixed:
            return Instances(feats, ref.detach(), batch, None, vox.stats)
        valid = torch.arange(num_voxels, device=ref.device) < num
        return Instances(feats, ref.detach(), batch, None, {}, valid, num, vox.dropped)

    def _exact_voxels(self, cloud, fg):
        """:class:`VirtualVoxels` by ``fsdlite.ops.voxelize``; points outside a smaller virtual grid are left out
        (counted in ``stats``)."""
        vox = ops.voxelize(cloud.xyz.detach(), self.virtual_vfe.voxel_size, self.virtual_vfe.point_range,
                           batch=cloud.batch)
        inside = vox.point2voxel >= 0
        included = mask_to_index(inside)
        outside_virtual = int((~inside & cloud.is_virtual).sum())
        stats = dict(num_virtual_points=fg.point_index.numel(), num_virtual_outside_grid=outside_virtual,
                     num_real_outside_grid=int(cloud.xyz.shape[0] - included.numel()) - outside_virtual,
                     num_virtual_grid_voxels=vox.voxel_coors.shape[0])
        return VirtualVoxels(cloud.xyz[included], cloud.feats[included], cloud.is_virtual[included],
                             vox.point2voxel[included], vox.voxel_coors, None, stats, None)

    def _bounded_voxels(self, inputs, cloud, fg):
        """:class:`VirtualVoxels` on fixed shapes: the valid real and virtual points first, ``static_voxelize``
        into ``max_virtual_voxels[0]`` slots (dump V), the mixer's maps built in the graph
        (:class:`~fsdlite.ops.GraphRulebookOps`; pair lists when ``max_virtual_pairs`` is
        set); ``dropped`` counts the overflow of every instance bound."""
        bounds, batch_size, strict = self.bounds['max_virtual_voxels'], inputs['batch_size'], inputs['strict']
        points = inputs['points']
        n, p = points.shape[0], fg.point_index.shape[0]
        num_points = torch.as_tensor(inputs['num_points'], device=points.device).reshape(())
        order = valid_first(num_points, fg.num_valid, n, p)
        xyz = cloud.xyz.index_select(0, order)
        vox = static_voxelize(xyz.detach(), num_points + fg.num_valid, self.virtual_vfe.voxel_size,
                              self.virtual_vfe.point_range, bounds[0], batch=cloud.batch.index_select(0, order),
                              batch_size=batch_size, dense_keys=True, strict=strict,
                              bound_name='max_virtual_voxels[0]')
        plan = self.mixer.conv_plan()
        maps, _, dropped = plan.build_rulebooks(vox.voxel_coors, vox.num_voxels, bounds,
                                                ops=ops.GraphRulebookOps(batch_size), bound_name='max_virtual_voxels',
                                                strict=strict, inverse_maps='max_virtual_pairs' not in self.bounds)
        pair_dropped = []
        if 'max_virtual_pairs' in self.bounds:
            pair_lists, pair_dropped = plan.build_pair_lists(maps, bounds, self.bounds['max_virtual_pairs'],
                                                             strict=strict, bound_name='max_virtual_pairs')
            maps = plan.tiled_kernel_maps(pair_lists, bounds)
        else:
            maps = plan.dense_kernel_maps(maps, bounds)
        dropped = torch.stack([vox.num_dropped] + [d.to(vox.num_dropped) for d in dropped[1:]]
                              + [d.to(vox.num_dropped) for d in pair_dropped])
        return VirtualVoxels(xyz, cloud.feats.index_select(0, order), cloud.is_virtual.index_select(0, order),
                             vox.point2voxel, vox.voxel_coors, maps, {}, dropped)
