"""GravNet layer: messages aggregated over the k nearest neighbours in a learned latent space.

Per graph (B graphs of N nodes, F features): append the graph mean of every feature (2F), an MLP
gives latent coordinates s (``latent_dims``) and messages (``message_dims``); each node takes its k
nearest nodes in s (itself included), weights their messages by exp(-scale * |s_i - s_j|^2) and
aggregates mean and max; an output MLP maps [x, mean x, mean msg, max msg] to ``out_channels``.
"""
import torch
from torch import nn

from fsdlite.ops import knn, knn_aggregate

from ...registry import MODELS
from ...structures.bounds import is_exporting
from ..layers.mlp import build_mlp
from .attention import SWISH
from .impl import check_impl


@MODELS.register_module()
class GravNetLayer(nn.Module):
    """GravNet layer with a dense (O(N²)) and an efficient (O(N k)) implementation of the same weights.

    Args:
        in_channels (int): F.
        latent_dims (int): size of the latent space s.
        message_dims (int): size of the messages.
        hidden_channels (tuple[int]): hidden widths of the MLP producing s and messages.
        out_channels (int): output width.
        k (int): neighbours per node, itself included.
        distance_scale (float): weight = exp(-distance_scale * squared latent distance).
        act_cfg (dict): activation (default swish).
    Shapes:
        x (B, N, F) -> (B, N, out_channels).
    """

    def __init__(self, in_channels, latent_dims=4, message_dims=22, hidden_channels=(52, 52), out_channels=48, k=25,
                 distance_scale=10.0, act_cfg=SWISH):
        super().__init__()
        if int(k) < 1:
            raise ValueError(f'GravNetLayer: k must be >= 1, got {k}')
        self.in_channels = int(in_channels)
        self.latent_dims = int(latent_dims)
        self.message_dims = int(message_dims)
        self.out_channels = int(out_channels)
        self.k = int(k)
        self.distance_scale = float(distance_scale)
        self.coords_and_messages = build_mlp(2 * self.in_channels, hidden_channels, norm_cfg=None, act_cfg=act_cfg,
                                             out_channels=self.latent_dims + self.message_dims)
        self.output = build_mlp(2 * self.in_channels + 2 * self.message_dims, (self.out_channels,), norm_cfg=None,
                                act_cfg=act_cfg)

    def _check(self, x):
        if x.dim() != 3 or x.shape[2] != self.in_channels:
            raise ValueError(f'GravNetLayer: x must have shape (B, N, {self.in_channels}), got {tuple(x.shape)}')
        if x.shape[1] < self.k:
            raise ValueError(f'GravNetLayer: k={self.k} neighbours requested but each graph has only N={x.shape[1]} '
                             f'nodes; use at least k nodes per graph or lower k in the config')

    def _embed(self, x):
        with_means = torch.cat([x, x.mean(1, keepdim=True).expand_as(x)], 2)
        slr = self.coords_and_messages(with_means)
        return with_means, slr[..., :self.latent_dims], slr[..., self.latent_dims:]

    def forward_dense(self, x):
        """Reference: (B, latent, N, N) differences, top-k of the (B, N, N) distances, (B, N, k, msg) gather.

        Also the exported form (``fsdlite.ops.knn`` has no ONNX form), hence coordinate-major differences (no
        broadcast over a trailing dimension of size ``latent``), an unsorted TopK (mean and max do not depend on
        the neighbour order) and a row ``index_select`` (one ONNX Gather, not GatherND; fsdlite.slim traces
        ``index_select``, not ``F.embedding``).
        """
        with_means, s, msg = self._embed(x)
        b, n, _ = x.shape
        st = s.transpose(1, 2)                                                   # (B, latent, N)
        diff = st.unsqueeze(3) - st.unsqueeze(2)                                 # (B, latent, N, N)
        sqdist = (diff * diff).sum(1)                                            # (B, N, N)
        knn_sqdist, index = sqdist.topk(self.k, dim=2, largest=False, sorted=False)
        weights = torch.exp(-self.distance_scale * knn_sqdist)
        rows = (index + (torch.arange(b, device=x.device) * n).view(b, 1, 1)).reshape(-1)  # rows of (B N, msg)
        gathered = msg.reshape(b * n, self.message_dims).index_select(0, rows).view(b, n, self.k, self.message_dims)
        weighted = gathered * weights.unsqueeze(-1)                              # (B, N, k, msg)
        aggregated = torch.cat([weighted.mean(2), weighted.max(2).values], 2)
        return self.output(torch.cat([with_means, aggregated], 2))

    def forward_efficient(self, x):
        """kNN with fixed (gradient-free) indices, differentiable k distances, fused aggregation.

        :func:`fsdlite.ops.knn` returns the indices (no gradient) and the k squared distances, whose
        backward recomputes s_i - s_j for the selected neighbours: only s and the indices are kept for
        backward, never a (B*N, k, latent) or (B*N, k, messages) tensor.
        """
        if is_exporting():  # fsdlite.ops.knn has no ONNX form: same neighbours by a fixed-size TopK per chunk
            return self.forward_dense(x)
        with_means, s, msg = self._embed(x)
        b, n, _ = x.shape
        s = s.reshape(b * n, self.latent_dims)
        batch = torch.arange(b, device=x.device).repeat_interleave(n)
        index, knn_sqdist = knn(s, s, self.k, batch, batch)                     # (B*N, k) each
        weights = torch.exp(-self.distance_scale * knn_sqdist)
        mean, maximum, _ = knn_aggregate(msg.reshape(b * n, self.message_dims), index, weights)
        aggregated = torch.cat([mean, maximum], 1).view(b, n, 2 * self.message_dims)
        return self.output(torch.cat([with_means, aggregated], 2))

    def forward(self, x, impl='efficient'):
        """Args: x (B, N, F); impl 'dense' | 'efficient'.  Returns (B, N, out_channels)."""
        self._check(x)
        if check_impl('GravNetLayer', impl) == 'dense':
            return self.forward_dense(x)
        return self.forward_efficient(x)
