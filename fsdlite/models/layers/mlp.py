"""Point-wise MLP blocks: ``Linear -> norm -> activation`` on (N, C) tensors."""
import torch
import torch.nn.functional as F
from torch import nn

from .bn_fold import fold_batch_norm, running_layer_by_layer
from .channels import channel_tuple
from .norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG, build_act, build_norm, norm_has_bias


class LinearNormAct(nn.Sequential):
    """``Linear(in_channels, out_channels) -> norm -> act`` on (N, in_channels) -> (N, out_channels).

    By default the linear layer has no bias when a norm follows (the norm's shift replaces it).

    Args:
        in_channels (int): input channels.
        out_channels (int): output channels.
        norm_cfg (dict | None): norm config (default ``BN1d(eps=1e-3, momentum=0.01)``).
        act_cfg (dict | None): activation config (default ``ReLU``).
        bias (bool | None): give the linear layer a bias; None: only when no norm with a shift follows. A
            LayerNorm after a bias-free layer keeps only the direction of its input (``LN(W a x) = LN(W x)`` for
            ``a > 0``): a layer fed positions needs the bias to tell a near point from a far one.
    """

    def __init__(self, in_channels, out_channels, norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG, bias=None):
        super().__init__()
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        bias = not norm_has_bias(norm_cfg) if bias is None else bool(bias)
        self.linear = nn.Linear(self.in_channels, self.out_channels, bias=bias)
        self.norm = build_norm(norm_cfg, self.out_channels)
        self.act = build_act(act_cfg)

    def _folded(self):
        """(C_in, C_out) weight and (C_out,) bias of linear + norm (:func:`.bn_fold.fold_batch_norm`), or None."""
        return fold_batch_norm(self.norm, self.linear.weight, self.linear.bias, torch.t, 'linear')

    def forward(self, x):
        """(N, in_channels) -> (N, out_channels); an eval-mode BatchNorm is folded into the linear layer when no
        gradient is needed (:mod:`.bn_fold`)."""
        folded = self._folded() if x.dim() == 2 else None
        if folded is None:
            return super().forward(x)
        return self.act(torch.addmm(folded.bias, x, folded.weight))

    def forward_gathered_concat(self, x, group_feats, index, gather):
        """``self(torch.cat([x, gather(group_feats, index)], 1))`` without building the concatenation.

        The linear layer's columns that read the gathered part are applied to the G group rows before the
        gather: no (N, C_x + C_g) copy and G instead of N rows for that part (G <= N: voxels or clusters of
        points).  Same result up to float rounding.

        Args:
            x (Tensor): (N, C_x) per-row features.
            group_feats (Tensor): (G, C_g) per-group features, ``C_x + C_g == in_channels``.
            index (Tensor): (N,) group of each row (whatever ``gather`` accepts, e.g. a dump slot).
            gather (callable): ``gather(t, index)`` -> the (N, ...) rows of ``t``; a row that gathers zeros
                gets no contribution from the group part, as with the concatenation.
        Returns:
            Tensor: (N, out_channels).
        """
        cx, cg = x.shape[1], group_feats.shape[1]
        if cx + cg != self.in_channels:
            raise ValueError(f'forward_gathered_concat: x ({cx} channels) and group_feats ({cg}) must add up to '
                             f'in_channels={self.in_channels}')
        if running_layer_by_layer():
            return self(torch.cat([x, gather(group_feats, index)], 1))
        folded = self._folded()
        if folded is not None:  # (C_in, C_out) folded weight; its shift added once the rows are complete
            gathered = gather(group_feats @ folded.weight[cx:], index)
            return self.act(torch.addmm(gathered, x, folded.weight[:cx]).add_(folded.bias))
        weight = self.linear.weight
        gathered = gather(F.linear(group_feats, weight[:, cx:]), index)
        if self.linear.bias is None:  # the GEMM adds into the gathered part: no second (N, C_out) pass
            out = torch.addmm(gathered, x, weight[:, :cx].t())
        else:
            out = F.linear(x, weight[:, :cx], self.linear.bias) + gathered
        return self.act(self.norm(out))


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
