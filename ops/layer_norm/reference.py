"""Pure-torch reference of layer_norm_rows (the formula written out), for tests and benchmarks."""
import torch


def layer_norm_rows_reference(x, weight, bias, eps):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` per row of ``x`` (N, C); biased variance. Returns (N, C)."""
    mean = x.mean(dim=1, keepdim=True)
    centred = x - mean
    var = (centred * centred).mean(dim=1, keepdim=True)
    return centred * torch.rsqrt(var + eps) * weight + bias


__all__ = ['layer_norm_rows_reference']
