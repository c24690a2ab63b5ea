"""Feature standardisation whose statistics are computed once over the whole input.

Chunked processing must not change the result, so unlike BatchNorm inside a chunk the batch
statistics are gathered over *all* rows first (in chunks, without gradient: they act as constants,
the gradient flows through the normalised values and the affine parameters) and then applied
per chunk.  Optional columns are log-transformed first (log(|x| + eps)): scattering angles,
displacements and X0 estimates span orders of magnitude.

``train_stats='running'`` standardises with the running statistics in training as well (they are still
updated from every batch, the first batch initialises them).  Use it when one batch holds only a few
correlated groups of rows, e.g. all the muons of one or two volumes: batch statistics would remove
exactly the per-volume level (the material) the model has to see, and training would differ from
evaluation.
"""
import torch
from torch import nn

from ...registry import MODELS
from ...structures.bounds import is_exporting


@MODELS.register_module()
class FeatureStandardizer(nn.Module):
    """Per-feature ``(t(x) - mean) / sqrt(var + eps) * weight + bias`` on the last dimension.

    Args:
        num_features (int): F, size of the last dimension.
        log_features (tuple[int]): columns replaced by log(|x| + log_eps) before standardising.
        log_eps (float): floor inside the log.
        momentum (float | None): running-statistics update rate (training mode); None: cumulative average.
            The first ``1 / momentum`` batches are averaged cumulatively (the first one initialises).
        train_stats (str): 'batch' (standardise with the batch statistics in training, like BatchNorm) or
            'running' (always with the running statistics; training then matches evaluation).
        eps (float): variance floor.
        stats_chunk_rows (int): rows per chunk while gathering statistics.
    Shapes:
        :meth:`params` takes (..., F) and returns (scale, shift), each (F,); :meth:`standardize` maps
        (..., F) -> (..., F) with them.
    """

    #: fsdlite.slim: a per-channel layer over the last dimension.
    slim_spec = dict(kind='channelwise', params={'weight': 0, 'bias': 0, 'running_mean': 0, 'running_var': 0},
                     channel_dim=-1)

    def __init__(self, num_features, log_features=(), log_eps=1e-6, momentum=0.1, eps=1e-5,
                 stats_chunk_rows=1 << 20, train_stats='batch'):
        super().__init__()
        if train_stats not in ('batch', 'running'):
            raise ValueError(f"FeatureStandardizer: train_stats must be 'batch' or 'running', got {train_stats!r}")
        if momentum is not None and not 0 < float(momentum) <= 1:
            raise ValueError(f'FeatureStandardizer: momentum must be in (0, 1] or None, got {momentum}')
        self.train_stats = train_stats
        self.num_features = int(num_features)
        bad = [c for c in log_features if not 0 <= int(c) < self.num_features]
        if bad:
            raise ValueError(f'FeatureStandardizer: log_features {bad} are outside [0, {self.num_features})')
        mask = torch.zeros(self.num_features, dtype=torch.bool)
        mask[list(log_features)] = True
        self.register_buffer('log_mask', mask, persistent=False)
        self.log_eps = float(log_eps)
        self.momentum = None if momentum is None else float(momentum)
        self.eps = float(eps)
        self.stats_chunk_rows = int(stats_chunk_rows)
        self.weight = nn.Parameter(torch.ones(self.num_features))
        self.bias = nn.Parameter(torch.zeros(self.num_features))
        self.register_buffer('running_mean', torch.zeros(self.num_features))
        self.register_buffer('running_var', torch.ones(self.num_features))
        # batches the running statistics have seen (saved, so that training a loaded model continues them)
        self.register_buffer('num_batches_tracked', torch.zeros((), dtype=torch.long))

    #: count assumed for running statistics loaded from a checkpoint that predates the saved batch count
    LOADED_STATS_BATCHES = 1000

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + 'num_batches_tracked'
        if key not in state_dict and prefix + 'running_mean' in state_dict:
            # older checkpoints: their running statistics are fitted, not fresh (never re-initialise from one batch)
            state_dict = dict(state_dict)
            state_dict[key] = torch.tensor(self.LOADED_STATS_BATCHES, dtype=torch.long)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def transform(self, x):
        """The log transform of the configured columns (identity elsewhere); (..., F) -> (..., F)."""
        if not is_exporting() and not self.log_mask.any():  # (a data-dependent branch cannot be exported)
            return x
        return torch.where(self.log_mask, torch.log(x.abs() + self.log_eps), x)

    @torch.no_grad()
    def batch_statistics(self, x):
        """Mean and (biased) variance of ``transform(x)`` over all rows, float64 accumulation."""
        rows = x.reshape(-1, self.num_features)
        total = torch.zeros(self.num_features, dtype=torch.float64, device=x.device)
        squares = torch.zeros_like(total)
        for piece in rows.split(self.stats_chunk_rows):
            t = self.transform(piece).double()
            total += t.sum(0)
            squares += t.square().sum(0)
        n = max(rows.shape[0], 1)
        mean = total / n
        var = (squares / n - mean.square()).clamp(min=0)
        if self.training and rows.shape[0] > 1:
            self.num_batches_tracked += 1
            rate = 1.0 / float(self.num_batches_tracked)
            if self.momentum is not None and self.train_stats == 'running':
                rate = max(rate, self.momentum)
            elif self.momentum is not None:
                rate = self.momentum          # 'batch' mode keeps BatchNorm's update rule
            self.running_mean.lerp_(mean.to(self.running_mean), rate)
            unbiased = var * n / (n - 1)
            self.running_var.lerp_(unbiased.to(self.running_var), rate)
        return mean.to(x.dtype), var.to(x.dtype)

    def params(self, x):
        """(scale, shift), each (F,): batch statistics of ``x`` in training mode with ``train_stats='batch'``,
        the running ones otherwise (updated from ``x`` first when training)."""
        if x.shape[-1] != self.num_features:
            raise ValueError(f'FeatureStandardizer: expected {self.num_features} features in the last dimension, '
                             f'got shape {tuple(x.shape)}')
        if self.training and self.train_stats == 'batch':
            mean, var = self.batch_statistics(x)
        elif self.training:
            self.batch_statistics(x)
            mean, var = self.running_mean.to(x.dtype), self.running_var.to(x.dtype)
        else:
            mean, var = self.running_mean.to(x.dtype), self.running_var.to(x.dtype)
        scale = self.weight.to(x.dtype) * torch.rsqrt(var + self.eps)
        return scale, self.bias.to(x.dtype) - mean * scale

    def standardize(self, x, scale, shift):
        """Standardise ``x`` (..., F) with the given (scale, shift)."""
        return self.transform(x) * scale + shift

    def forward(self, x):
        """Standardise (..., F) in one go (statistics from ``x`` itself in training mode)."""
        return self.standardize(x, *self.params(x))
