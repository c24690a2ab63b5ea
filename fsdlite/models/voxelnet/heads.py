"""Per-voxel heads: material class log-probabilities, or log X0 regression.

Both apply a self-attention across the voxels of a volume (the reference's NodePredictor) and a
linear layer, and weight voxels so that block and background count equally in the loss (n/2 each,
the reference's VoxelImageLoss balancing).
"""
import torch
import torch.nn.functional as F
from torch import nn

from ...registry import MODELS
from .attention import SWISH, GraphSelfAttention


def balanced_voxel_weights(block_mask):
    """Per-voxel loss weights: block and background each sum to 1/2 per volume (uniform if one is empty).

    Args:
        block_mask (Tensor): (B, V) bool.
    Returns:
        Tensor: (B, V) float32 weights, each volume summing to 1.
    """
    block = block_mask.float()
    n_block = block.sum(1, keepdim=True)
    n_bkg = (1 - block).sum(1, keepdim=True)
    both = (n_block > 0) & (n_bkg > 0)
    balanced = block * 0.5 / n_block.clamp(min=1) + (1 - block) * 0.5 / n_bkg.clamp(min=1)
    uniform = torch.full_like(block, 1.0) / block.shape[1]
    return torch.where(both, balanced, uniform)


class _VoxelHead(nn.Module):
    def __init__(self, in_channels, attn_channels, out_channels, act_cfg):
        super().__init__()
        self.in_channels = int(in_channels)
        self.attention = GraphSelfAttention(in_channels, attn_channels, act_cfg) if attn_channels else None
        self.linear = nn.Linear(self.in_channels, int(out_channels))

    def _features(self, x, impl):
        return self.attention(x, impl) if self.attention is not None else x


@MODELS.register_module()
class VoxelClassHead(_VoxelHead):
    """Material classification per voxel.

    Args:
        in_channels (int): voxel feature width.
        num_classes (int): C.
        attn_channels (int): query/key width of the cross-voxel attention (0 disables it).
    Shapes:
        forward: (B, V, in_channels) -> (B, V, C) log-probabilities.
    """

    def __init__(self, in_channels=80, num_classes=5, attn_channels=20, act_cfg=SWISH):
        super().__init__(in_channels, attn_channels, num_classes, act_cfg)
        self.num_classes = int(num_classes)

    def forward(self, x, impl='efficient'):
        """(B, V, in_channels) -> (B, V, C) log-probabilities."""
        return self.linear(self._features(x, impl)).log_softmax(-1)

    def loss(self, output, targets):
        """Balanced NLL; ``targets`` has ``labels`` (B, V) int64 and ``block_mask`` (B, V) bool."""
        labels = targets['labels']
        if labels.min() < 0 or labels.max() >= self.num_classes:
            raise ValueError(f'VoxelClassHead: labels must lie in [0, {self.num_classes}), got '
                             f'[{int(labels.min())}, {int(labels.max())}]')
        nll = F.nll_loss(output.transpose(1, 2), labels, reduction='none')       # (B, V)
        weights = balanced_voxel_weights(targets['block_mask'])
        return dict(loss_cls=(nll * weights).sum(1).mean())

    def predict(self, output):
        """Per volume: dict(pts_semantic_mask (V,), pts_scores (V, C) probabilities)."""
        probs = output.exp()
        return [dict(pts_semantic_mask=p.argmax(-1), pts_scores=p) for p in probs]


@MODELS.register_module()
class VoxelX0Head(_VoxelHead):
    """Regression of log X0 (metres) per voxel.

    Shapes:
        forward: (B, V, in_channels) -> (B, V) predicted log X0.
    """

    def __init__(self, in_channels=80, attn_channels=20, act_cfg=SWISH):
        super().__init__(in_channels, attn_channels, 1, act_cfg)

    def forward(self, x, impl='efficient'):
        """(B, V, in_channels) -> (B, V) predicted log X0."""
        return self.linear(self._features(x, impl)).squeeze(-1)

    def loss(self, output, targets):
        """Balanced squared error of log X0; ``targets`` has ``x0`` (B, V) metres and ``block_mask``."""
        x0 = targets['x0']
        if (x0 <= 0).any():
            raise ValueError('VoxelX0Head: target x0 must be > 0 metres')
        err = (output - x0.log()).square()
        return dict(loss_x0=(err * balanced_voxel_weights(targets['block_mask'])).sum(1).mean())

    def predict(self, output):
        """Per volume: dict(log_x0 (V,))."""
        return [dict(log_x0=o) for o in output]
