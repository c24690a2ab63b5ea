"""A VoxelNet stage: GravNet layer followed by an attention collapse, one vector per graph."""
from torch import nn

from ...registry import MODELS


@MODELS.register_module()
class GraphStage(nn.Module):
    """``collapse(gravnet(x))``.

    Args:
        gravnet (dict): config of a :class:`~.gravnet.GravNetLayer`.
        collapse (dict): config of an :class:`~.collapse.AttentionCollapse` (its ``in_channels`` defaults
            to the GravNet output width).
    Shapes:
        x (B, N, F) -> (B, collapse.out_channels).
    """

    def __init__(self, gravnet, collapse):
        super().__init__()
        self.gravnet = MODELS.build(dict(gravnet))
        collapse = dict(collapse)
        collapse.setdefault('in_channels', self.gravnet.out_channels)
        self.collapse = MODELS.build(collapse)
        self.in_channels = self.gravnet.in_channels
        self.out_channels = self.collapse.out_channels

    def forward(self, x, impl='efficient'):
        """Args: x (B, N, F); impl 'dense' | 'efficient'.  Returns (B, out_channels)."""
        return self.collapse(self.gravnet(x, impl), impl)
