"""An out-of-tree fsdlite plugin: registers ``ResidualPointSegHead`` into fsdlite's MODELS registry.

Configs load it with ``custom_imports = dict(imports=['fsdlite_plugin_example'])`` (the tools find the folder
``examples/plugin`` beside the config; elsewhere it must be importable); nothing inside fsdlite is edited.

``ChannelGate`` shows how a plugin layer declares how it slims (``slim_spec``, see :mod:`fsdlite.slim.specs`):
``tools/slim.py`` then keeps its per-channel gate in step with the channels chosen for the features it gates.
"""
import torch
from torch import nn

from fsdlite.models.lidar.point_seg_head import PointSegHead
from fsdlite.registry import MODELS


@MODELS.register_module()
class ChannelGate(nn.Module):
    """Per-channel sigmoid gate: (P, C) -> (P, C), ``y = x * sigmoid(logit)``.

    Args:
        channels (int): C.
    """

    #: fsdlite.slim: output channel c is input channel c; ``logit`` is indexed by channel on dim 0.
    slim_spec = dict(kind='channelwise', params={'logit': 0}, channel_dim=-1)

    def __init__(self, channels):
        super().__init__()
        self.logit = nn.Parameter(torch.zeros(int(channels)))

    def forward(self, x):
        return x * torch.sigmoid(self.logit)


@MODELS.register_module()
class ResidualPointSegHead(PointSegHead):
    """PointSegHead whose shared MLP output gets a projected shortcut of its input and a per-channel gate.

    Args: as :class:`PointSegHead`. Input (P, C_in) point features; outputs as PointSegHead.
    """

    def __init__(self, in_channels, num_classes, hidden_channels=(128, 128),
                 loss_seg=dict(type='SigmoidFocalLoss', gamma=3.0, alpha=0.8), score_thr=0.5, ignore_index=-1):
        super().__init__(in_channels, num_classes, hidden_channels=hidden_channels, loss_seg=loss_seg,
                         score_thr=score_thr, ignore_index=ignore_index)
        self.shortcut = nn.Linear(in_channels, self.seg_feat_channels, bias=False)
        self.gate = ChannelGate(self.seg_feat_channels)

    def forward(self, point_feats):
        seg_feats = self.gate(self.shared(point_feats) + self.shortcut(point_feats))
        return dict(seg_logits=self.cls_layer(seg_feats), seg_feats=seg_feats)
