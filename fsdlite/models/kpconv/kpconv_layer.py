"""KPConv layer: rigid kernel-point convolution, optionally deformable (and modulated).

``y[q] = sum_k (m[q, k] sum_h infl(|p_j - q - kp_k|) x_j) @ W_k``. The deformable variant predicts
per-query kernel-point offsets (scaled by sigma) and, when modulated, modulations ``2 sigmoid(.)``
with a rigid KPConv (zero-initialised, so training starts rigid), and exposes its fitting and
repulsion regularisers through :attr:`KPConv.regularizers` after each training forward.
Deformable layers see the neighbourhood they are given (KPConv-PyTorch used a larger one).
"""
import math

import torch
from torch import nn

from fsdlite.registry import MODELS

from .kp_base import KernelPointLayer, ops, references


@MODELS.register_module()
class KPConv(KernelPointLayer):
    """Kernel-point convolution (C1 -> C2) with weights (K, C1, C2).

    Args:
        in_channels (int): C1.
        out_channels (int): C2.
        kernel_size, radius, sigma, influence, aggregation, impl: see :class:`KernelPointLayer`.
        deformable (bool): learn per-query kernel-point offsets.
        modulated (bool): with ``deformable``, also learn per-kernel-point modulations.
        repulse_extent (float): repulsion regulariser threshold, in units of sigma.
        bias (bool): add a learned bias.
        **kernel_cfg: ``shells``, ``fixed``, ``rotation``, ``ratio`` of the kernel points.
    Forward: ``(q_pts (M, 3), s_pts (N, 3), neighbors (M, H), x (N, C1)) -> (M, C2)``.
    """

    #: fsdlite.slim: input channels index dim 1 of the (K, C1, C2) kernel (and of the offset conv's), output
    #: channels dim 2 and the bias; the features are forward argument 3.
    slim_spec = dict(kind='producer', in_params={'weights': 1, 'offset_conv.weights': 1},
                     out_params={'weights': 2, 'bias': 0}, input_arg=3)

    def __init__(self, in_channels, out_channels, kernel_size=15, radius=1.0, sigma=None, influence='linear',
                 aggregation='sum', deformable=False, modulated=False, repulse_extent=1.2, bias=False, impl='fused',
                 **kernel_cfg):
        super().__init__(kernel_size, radius, sigma, influence, aggregation, impl=impl, **kernel_cfg)
        if modulated and not deformable:
            raise ValueError('KPConv: modulated=True needs deformable=True')
        self.in_channels, self.out_channels = in_channels, out_channels
        self.weights = nn.Parameter(torch.empty(kernel_size, in_channels, out_channels))
        bound = 1.0 / math.sqrt(max(kernel_size * in_channels, 1))
        nn.init.uniform_(self.weights, -bound, bound)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.deformable, self.modulated = deformable, modulated
        self.repulse_extent = repulse_extent
        self.regularizers = None
        if deformable:
            self.offset_conv = KPConv(in_channels, (4 if modulated else 3) * kernel_size, kernel_size, radius, sigma,
                                      influence, aggregation, bias=True, impl=impl, **kernel_cfg)
            nn.init.zeros_(self.offset_conv.weights)

    def forward(self, q_pts, s_pts, neighbors, x):
        """(M, C2) output; deformable layers shift the kernel points per query (and store :attr:`regularizers`
        while training)."""
        kp = self.kernel(x)
        modulations = None
        if self.deformable:
            raw = self.offset_conv(q_pts, s_pts, neighbors, x)
            k = self.kernel_size
            kp = kp[None] + raw[:, :3 * k].reshape(-1, k, 3) * self.sigma
            if self.modulated:
                modulations = 2 * torch.sigmoid(raw[:, 3 * k:])
            self.regularizers = self.deform_regularizers(q_pts, s_pts, neighbors, kp) if self.training else None
        weights = self.weights.to(x.dtype)
        forms = self.forms()
        if forms == 'fused':
            y = ops().kpconv(q_pts, s_pts, neighbors, x, kp, weights, modulations, **self.geometry())
        else:
            y = references(forms)[0](q_pts, s_pts, neighbors, x, kp, weights, modulations, **self.geometry())
        return y + self.bias.to(y.dtype) if self.bias is not None else y

    def deform_regularizers(self, q_pts, s_pts, neighbors, kp, chunk=8192):
        """Fitting and repulsion losses of deformed kernel points ``kp`` (M, K, 3).

        fitting: mean over queries/kernel points of the squared distance (in sigma units) from each
        kernel point to its closest real neighbour (queries without neighbours are skipped);
        repulsion: mean over queries of ``sum_{i != j} min(|kp_i - kp_j| / sigma - repulse_extent, 0)^2 / K``.
        Returns:
            dict: ``fitting`` and ``repulsion`` scalars (differentiable w.r.t. the offsets).
        """
        n, k = s_pts.shape[0], kp.shape[1]
        with torch.no_grad():
            padded = torch.cat([s_pts, s_pts.new_full((1, 3), float('inf'))], 0)
            closest = []
            for i in range(0, q_pts.shape[0], chunk):
                rel = padded[neighbors[i:i + chunk]] - q_pts[i:i + chunk, None]  # (b, H, 3)
                d2 = ((rel[:, :, None] - kp[i:i + chunk, None].detach()) ** 2).sum(-1)  # (b, H, K)
                d2 = torch.nan_to_num(d2, nan=float('inf'))
                closest.append(d2.argmin(1) if d2.shape[1] else d2.new_zeros((d2.shape[0], k), dtype=torch.long))
            closest = torch.cat(closest) if closest else neighbors.new_zeros((0, k))
            j = neighbors.gather(1, closest) if neighbors.shape[1] else torch.full_like(closest, n)
            valid = j < n
        rel = s_pts[j.clamp(max=max(n - 1, 0))] - q_pts[:, None] if n else kp.detach() * 0
        fit = ((rel - kp) ** 2).sum(-1) / self.sigma ** 2
        fitting = (fit * valid).sum() / valid.sum().clamp(min=1)
        diff = kp[:, :, None] - kp[:, None]
        dist = torch.sqrt((diff ** 2).sum(-1) + 1e-12) / self.sigma
        off_diagonal = 1 - torch.eye(k, dtype=kp.dtype, device=kp.device)
        rep = (torch.clamp(dist - self.repulse_extent, max=0) ** 2 * off_diagonal).sum((1, 2)) / k
        repulsion = rep.mean() if rep.numel() else kp.sum() * 0
        return dict(fitting=fitting, repulsion=repulsion)
