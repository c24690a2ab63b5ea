"""Attention collapse: self-attention over a graph's nodes, a final MLP, then mean ‖ max pooling."""
import torch
from torch import nn

from ...registry import MODELS
from ..layers.mlp import build_mlp
from .attention import SWISH, GraphSelfAttention


@MODELS.register_module()
class AttentionCollapse(nn.Module):
    """Collapse each graph to one vector.

    Args:
        in_channels (int): C, node width.
        attn_channels (int): query/key width of the self-attention (0 disables it).
        out_channels (int): width of the final MLP; the output has 2 * out_channels (mean ‖ max).
        act_cfg (dict): activation (default swish).
    Shapes:
        x (B, N, C) -> (B, 2 * out_channels).
    """

    def __init__(self, in_channels, attn_channels=12, out_channels=40, act_cfg=SWISH):
        super().__init__()
        self.in_channels = int(in_channels)
        self.out_channels = 2 * int(out_channels)
        self.attention = GraphSelfAttention(in_channels, attn_channels, act_cfg) if attn_channels else None
        self.final = build_mlp(self.in_channels, (int(out_channels),), norm_cfg=None, act_cfg=act_cfg)

    def forward(self, x, impl='efficient'):
        """Args: x (B, N, C); impl 'dense' | 'efficient'.  Returns (B, 2 * out_channels)."""
        if self.attention is not None:
            x = self.attention(x, impl)
        x = self.final(x)
        return torch.cat([x.mean(1), x.max(1).values], 1)
