"""SIR: sparse instance recognition, a PointNet-like encoder over clusters of points.

Each block ``b`` sees the point features ``x`` and the position relative to the cluster centre
``r = (p - cluster_xyz) / xyz_normalizer``::

    h = LinearNormAct([x, r]) * gate_b(r)              # relative-position gate
    for each layer:  m = segment_max(h, cluster)        # cluster feature
                     h = [h, m[cluster]]  -> next LinearNormAct (except after the last layer)
    x = [h_last, m_last[cluster]] (+ x when the widths match: shortcut)

The cluster feature is the concatenation of every layer's segment maximum of every block.
"""
import torch
from mmengine.model import BaseModule
from torch import nn

from ...registry import MODELS
from ..layers.execution import gather, segment_reduce
from ..layers.mlp import LinearNormAct

LN_CFG = dict(type='LN')
GELU_CFG = dict(type='GELU')


def linear_norm_act(in_channels, out_channels, bias=False):
    """Linear + LayerNorm + GELU, the layer of SIR and the cluster head; ``bias`` for a layer fed positions
    (:class:`~fsdlite.models.layers.mlp.LinearNormAct`: without it the norm keeps only their direction)."""
    return LinearNormAct(in_channels, out_channels, norm_cfg=LN_CFG, act_cfg=GELU_CFG, bias=bias)


class SIRBlock(nn.Module):
    """One SIR block: layers of Linear+LN+GELU, each followed by a segment max over clusters."""

    def __init__(self, in_channels, channels, rel_channels):
        super().__init__()
        channels = list(channels)
        self.layers = nn.ModuleList()
        width = in_channels + 3
        for c in channels:  # the first layer reads the relative positions
            self.layers.append(linear_norm_act(width, c, bias=not self.layers))
            width = 2 * c
        gate, w = [], 3
        for c in rel_channels:
            gate.append(linear_norm_act(w, c, bias=not gate))
            w = c
        gate.append(nn.Linear(w, channels[0]))
        self.gate = nn.Sequential(*gate)
        self.out_channels = width
        self.cluster_channels = sum(channels)

    def forward(self, x, rel, cluster, num_clusters):
        """x (P, F), rel (P, 3), cluster (P,) in [0, K) -> point features (P, 2 C_last), cluster features (K, sum C).

        In the fixed execution mode (:mod:`~fsdlite.models.layers.execution`) ``cluster == K`` is the dump slot
        (padding rows).
        """
        h = self.layers[0](torch.cat([x, rel], dim=1)) * self.gate(rel)
        maxima = [segment_reduce(h, cluster, num_clusters, 'max')]
        for layer in self.layers[1:]:  # layer(cat([h, m[cluster]])), without the concat
            h = layer.forward_gathered_concat(h, maxima[-1], cluster, gather)
            maxima.append(segment_reduce(h, cluster, num_clusters, 'max'))
        h = torch.cat([h, gather(maxima[-1], cluster)], dim=1)
        if h.shape[1] == x.shape[1]:
            h = h + x
        return h, torch.cat(maxima, dim=1)


@MODELS.register_module()
class SIR(BaseModule):
    """Stack of :class:`SIRBlock` producing one feature vector per cluster.

    Args:
        in_channels (int): point feature width F.
        block_channels (sequence[sequence[int]]): per block, the widths of its layers.
        rel_channels (sequence[int]): hidden widths of each block's relative-position gate.
        xyz_normalizer (sequence[float]): divides the offsets to the cluster centre.
    Shapes: ``forward(feats (P, F), xyz (P, 3), cluster (P,), num_clusters K, cluster_xyz (K, 3))``
    returns cluster features (K, ``out_channels``) and point features (P, ``point_channels``).
    In the fixed execution mode ``cluster == K`` marks padding rows (dump slot); empty clusters get zero features
    in both modes.
    """

    def __init__(self, in_channels, block_channels=((64, 64), (64, 64), (64, 64)), rel_channels=(16,),
                 xyz_normalizer=(20.0, 20.0, 4.0), init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        block_channels = [tuple(b) for b in block_channels]  # never mutate the config
        if not block_channels or any(not b or min(b) <= 0 for b in block_channels):
            raise ValueError(f'SIR: block_channels must be non-empty tuples of positive widths, got {block_channels}')
        if len(xyz_normalizer) != 3 or min(xyz_normalizer) <= 0:
            raise ValueError(f'SIR: xyz_normalizer must be 3 positive numbers, got {xyz_normalizer}')
        self.register_buffer('xyz_normalizer', torch.tensor(xyz_normalizer, dtype=torch.float32), persistent=False)
        self.blocks = nn.ModuleList()
        width = in_channels
        for channels in block_channels:
            block = SIRBlock(width, channels, tuple(rel_channels))
            self.blocks.append(block)
            width = block.out_channels
        self.point_channels = width
        self.out_channels = sum(b.cluster_channels for b in self.blocks)

    def forward(self, feats, xyz, cluster, num_clusters, cluster_xyz):
        """See the class docstring."""
        points = feats.shape[0]
        if xyz.shape[0] != points or cluster.shape != (points,) or cluster_xyz.shape != (num_clusters, 3):
            raise ValueError(f'SIR: expected feats (P, F), xyz (P, 3), cluster (P,), cluster_xyz (K={num_clusters}, '
                             f'3), got {tuple(feats.shape)}, {tuple(xyz.shape)}, {tuple(cluster.shape)}, '
                             f'{tuple(cluster_xyz.shape)}')
        rel = (xyz - gather(cluster_xyz, cluster)) / self.xyz_normalizer.to(xyz.dtype)
        x, cluster_feats = feats, []
        for block in self.blocks:
            x, m = block(x, rel, cluster, num_clusters)
            cluster_feats.append(m)
        return torch.cat(cluster_feats, dim=1), x
