"""Single-head graph self-attention: out = x + act(W (softmax(q k^T / sqrt(A)) v)).

q and k have ``attn_channels`` A; v keeps the C input channels.  ``dense`` builds the (B, N, N)
attention matrix.  ``efficient`` uses :func:`torch.nn.functional.scaled_dot_product_attention`,
whose memory-lean (flash) kernels need equal q/k/v head sizes (unequal sizes silently fall back to
the O(N²) math kernel): q and k are zero-padded to max(A, C) channels (zeros leave q.k unchanged),
v likewise, and the scale is given explicitly as 1/sqrt(A).  This is exact and, on CPU, about twice
as fast as splitting v into C/A heads that share q and k.
"""
import math

import torch.nn.functional as F
from torch import nn

from ...structures.bounds import is_exporting
from ..layers.mlp import build_mlp
from .impl import check_impl

SWISH = dict(type='SiLU')


class GraphSelfAttention(nn.Module):
    """Residual single-head self-attention over the nodes of each graph.

    Args:
        channels (int): C, node feature width (input = output).
        attn_channels (int): A, width of queries and keys.
        act_cfg (dict): activation after the output projection (default swish).
    Shapes:
        x (B, N, C) -> (B, N, C).
    """

    def __init__(self, channels, attn_channels, act_cfg=SWISH):
        super().__init__()
        self.channels = int(channels)
        self.attn_channels = int(attn_channels)
        self.query = nn.Linear(self.channels, self.attn_channels)
        self.key = nn.Linear(self.channels, self.attn_channels)
        self.value = nn.Linear(self.channels, self.channels)
        self.proj = build_mlp(self.channels, (self.channels,), norm_cfg=None, act_cfg=act_cfg)

    def attend_dense(self, x):
        """softmax(q k^T / sqrt(A)) v with the explicit (B, N, N) matrix."""
        logits = self.query(x) @ self.key(x).transpose(1, 2) / math.sqrt(self.attn_channels)
        return logits.softmax(-1) @ self.value(x)

    def attend_efficient(self, x):
        """The same product through SDPA on zero-padded q, k, v of equal width (no N x N matrix)."""
        a, c = self.attn_channels, self.channels
        width = max(a, c)
        q = F.pad(self.query(x), (0, width - a)).unsqueeze(1)              # (B, 1, N, width)
        k = F.pad(self.key(x), (0, width - a)).unsqueeze(1)
        v = F.pad(self.value(x), (0, width - c)).unsqueeze(1)
        out = F.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(a))
        return out.squeeze(1)[..., :c]

    def forward(self, x, impl='efficient'):
        """Args: x (B, N, C); impl 'dense' | 'efficient'.  Returns (B, N, C).

        While exporting the dense form is used: the same product without the zero padding of q and k to C
        channels (which only serves the memory-lean SDPA kernels), i.e. smaller MatMuls and no Pad nodes.
        """
        dense = check_impl('GraphSelfAttention', impl) == 'dense' or is_exporting()
        attend = self.attend_dense if dense else self.attend_efficient
        return x + self.proj(attend(x))
