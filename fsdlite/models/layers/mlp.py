"""Point-wise MLP blocks: ``Linear -> norm -> activation`` on (N, C) tensors."""
from torch import nn

from .channels import channel_tuple
from .norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG, build_act, build_norm, norm_has_bias


class LinearNormAct(nn.Sequential):
    """``Linear(in_channels, out_channels) -> norm -> act`` on (N, in_channels) -> (N, out_channels).

    The linear layer has no bias when a norm follows (the norm's shift replaces it).

    Args:
        in_channels (int): input channels.
        out_channels (int): output channels.
        norm_cfg (dict | None): norm config (default ``BN1d(eps=1e-3, momentum=0.01)``).
        act_cfg (dict | None): activation config (default ``ReLU``).
    """

    def __init__(self, in_channels, out_channels, norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG):
        super().__init__()
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.linear = nn.Linear(self.in_channels, self.out_channels, bias=not norm_has_bias(norm_cfg))
        self.norm = build_norm(norm_cfg, self.out_channels)
        self.act = build_act(act_cfg)


def build_mlp(in_channels, channels, norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG, out_channels=None):
    """Stack of :class:`LinearNormAct` layers, optionally ending with a plain ``Linear`` output layer.

    Args:
        in_channels (int): C_in of the (N, C_in) input.
        channels (Sequence[int]): hidden widths, one :class:`LinearNormAct` each (may be empty).
        norm_cfg (dict | None): norm config of the hidden layers.
        act_cfg (dict | None): activation config of the hidden layers.
        out_channels (int | None): if given, a final ``Linear(.., out_channels)`` with bias.
    Returns:
        nn.Sequential: maps (N, C_in) to (N, channels[-1]) or (N, out_channels).
    """
    channels = channel_tuple('channels', channels)
    layers = []
    prev = int(in_channels)
    for c in channels:
        layers.append(LinearNormAct(prev, c, norm_cfg, act_cfg))
        prev = c
    if out_channels is not None:
        layers.append(nn.Linear(prev, int(out_channels)))
    return nn.Sequential(*layers)


__all__ = ['LinearNormAct', 'build_mlp']
