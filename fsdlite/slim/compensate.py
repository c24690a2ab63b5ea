"""Least-squares compensation of dropped input channels (calibrated weight transfer).

Slicing a layer's weight to its kept input columns ``K`` throws away what the dropped columns ``D`` contributed.
Trained channels are correlated, so much of that contribution can be predicted from the kept ones, measured on
calibration data (the original model's own activations): with the input's mean ``mu`` and covariance ``S``,

    x_D ~ A x_K + b,   A = S_DK (S_KK + r I)^-1,   b = mu_D - A mu_K     (ridge ``r`` relative to the kept variance)

and the layer keeps ``W_K + W_D A``. A pointwise layer with a bias (Linear: weight (out, in)) also adds ``W_D b``
to its bias. Other layers (sparse / point convolutions, compensated offset by offset with the per-voxel channel
statistics; layers without a bias) leave the constant part to the norm layer that follows them, which removes
per-channel offsets (how many neighbours feed a convolution output also varies per voxel). The residual's
covariance is no larger (in the PSD order) than what plain slicing leaves, so a pointwise layer fed with the
original's inputs never does worse on the calibration data up to that constant.
"""
from contextlib import ExitStack

import torch

from fsdlite.models.layers.bn_fold import layer_by_layer

from .errors import SlimError
from .specs import spec_for

#: default ridge, relative to the mean variance of the kept columns
RIDGE = 1e-2


class InputMoments:
    """Running count, sum and sum of outer products (float64) of a layer input's channel axis (last axis)."""

    def __init__(self, size):
        self.count = 0
        self.sum = torch.zeros(size, dtype=torch.float64)
        self.outer = torch.zeros(size, size, dtype=torch.float64)

    def add(self, x):
        """Accumulate ``x`` (..., size) (any float dtype)."""
        x = x.detach().reshape(-1, x.shape[-1]).to(torch.float64).cpu()
        self.count += x.shape[0]
        self.sum += x.sum(0)
        self.outer += x.T @ x

    def mean_cov(self):
        """``(mean (C,), covariance (C, C))`` of the accumulated rows."""
        mean = self.sum / max(self.count, 1)
        return mean, self.outer / max(self.count, 1) - torch.outer(mean, mean)


def input_moments(model, dims, batches):
    """Channel moments of the inputs of the layers that own ``dims``, over ``batches``.

    Args:
        model (nn.Module): the original model (weights loaded).
        dims (list[Dim]): dims of the channel graph; the layers of its 'in' dims are observed.
        batches (Iterable[dict]): preprocessed batches (``inputs``, ``data_samples``) for ``model(..., 'tensor')``.
    Returns:
        dict: layer name -> :class:`InputMoments` (layers that never saw an input of their width are absent).
    """
    modules = dict(model.named_modules())
    moments = {}

    def observer(dim, spec):
        def hook(module, args, kwargs):
            feats = spec.input_features(args, kwargs)
            if feats is None or not feats.is_floating_point() or feats.dim() < 1:
                return
            feats = feats.movedim(spec.channel_dim, -1)
            if feats.shape[-1] == dim.size:
                moments.setdefault(dim.leaf, InputMoments(dim.size)).add(feats)
        return hook

    was_training = model.training
    model.eval()
    with ExitStack() as stack:
        for d in {d.leaf: d for d in dims if d.role == 'in'}.values():
            spec = spec_for(modules[d.leaf])
            if spec is None:
                continue
            handle = modules[d.leaf].register_forward_pre_hook(observer(d, spec), with_kwargs=True)
            stack.callback(handle.remove)
        stack.enter_context(torch.no_grad())
        stack.enter_context(layer_by_layer())
        for batch in batches:
            model(**batch, mode='tensor')
    model.train(was_training)
    return moments


def compensation_targets(graph, indices):
    """'in' dims that lose columns and carry one plain weight slice (no matrix view) to compensate."""
    return [d for d in graph.dims
            if d.role == 'in' and indices[d.id].numel() < d.size and len(d.params) == 1 and d.params[0][2] is None]


def compensate_state(state, graph, indices, moments, ridge=RIDGE):
    """Fold the least-squares prediction of every dropped input column into the kept ones (full-size tensors).

    Args:
        state (dict): name -> tensor of the original model; a copy is returned, ``state`` is not changed.
        graph (ChannelGraph): the traced graph the selection used.
        indices (dict): dim id -> kept columns.
        moments (dict): layer name -> :class:`InputMoments` (:func:`input_moments`).
        ridge (float): ridge ``r`` relative to the mean variance of the kept columns (> 0).
    Returns:
        tuple: (new state, report ``[(layer, original width, kept width, unexplained fraction)]``), where the
        unexplained fraction is the share of the dropped columns' variance that the kept ones do not predict.
    """
    if not ridge > 0:
        raise SlimError(f'compensation ridge must be > 0, got {ridge!r}')
    out, report = dict(state), []
    for d in compensation_targets(graph, indices):
        m = moments.get(d.leaf)
        if m is None or m.count < 2 or m.sum.numel() != d.size:
            continue
        pname, axis, _, _ = d.params[0]
        weight = state[pname]
        bias_name = pname[:-len('weight')] + 'bias' if pname.endswith('weight') else None
        intercept = weight.dim() == 2 and axis == 1 and state.get(bias_name) is not None
        mean, cov = m.mean_cov()
        kept = indices[d.id]
        dropped = torch.ones(d.size, dtype=torch.bool)
        dropped[kept] = False
        dropped = dropped.nonzero()[:, 0]
        s_kk, s_dk = cov[kept][:, kept], cov[dropped][:, kept]
        scale = float(s_kk.diagonal().mean())
        if not scale > 0:
            continue
        a = torch.linalg.solve(s_kk + ridge * scale * torch.eye(kept.numel(), dtype=cov.dtype), s_dk.T).T
        var_d = float(cov[dropped][:, dropped].diagonal().sum())
        explained = float((a * s_dk).sum())
        report.append((d.leaf, d.size, int(kept.numel()), 1.0 - explained / var_d if var_d > 0 else 0.0))
        w = weight.detach().to(torch.float64).movedim(axis, -1)
        new = w.clone()
        new[..., kept] += w[..., dropped] @ a
        out[pname] = new.movedim(-1, axis).to(weight.dtype).contiguous()
        if intercept:
            b = mean[dropped] - a @ mean[kept]
            bias = state[bias_name]
            out[bias_name] = (bias.to(torch.float64) + w[..., dropped] @ b).to(bias.dtype)
    return out, report


__all__ = ['RIDGE', 'InputMoments', 'input_moments', 'compensation_targets', 'compensate_state']
