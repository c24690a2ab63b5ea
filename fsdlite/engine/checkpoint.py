"""Reading checkpoints and loading them strictly, with errors that name the file and what does not match.

Used by the tools (``tools/*.py``, ``deploy/``), the deploy exporter and :mod:`fsdlite.slim`; mmengine's own
``load_from`` loads non-strictly (a checkpoint of another config would silently leave random weights).
"""
import torch

from ..utils.compat import load_from_local_file
from .errors import ToolError, require_file


class CheckpointMismatchError(ToolError, ValueError):
    """A checkpoint file was read but does not fit (no state dict, another config's weights, no training state)."""


def read_state_dict(path, what='checkpoint'):
    """``(checkpoint, state_dict)`` of a checkpoint file (``{'state_dict': ...}`` or a bare state dict;
    ``module.`` prefixes removed).

    Raises:
        FileNotFoundError: not a file; CheckpointLoadError: unreadable (truncated, corrupt, not torch.save);
        CheckpointMismatchError: it holds no state dict.
    """
    ckpt = load_from_local_file(require_file(path, what), map_location='cpu')
    state = ckpt.get('state_dict', ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointMismatchError(f'{what} {path!r} holds no state dict; expected a dict of tensors or '
                                      '{"state_dict": ...} written by torch.save / mmengine')
    return ckpt, {k[len('module.'):] if k.startswith('module.') else k: v for k, v in state.items()}


def load_state_strict(model, state, path, config, what='checkpoint'):
    """``model.load_state_dict(state, strict=True)`` with an error naming what does not match.

    Args:
        model (torch.nn.Module): the model of ``config``.
        state (dict): the state dict read from ``path``.
        path (str): the checkpoint (named in the message).
        config (str): the config (path or model type) the message names.
        what (str): how the message names the file (e.g. ``'--resume checkpoint'``).
    Returns:
        the model.
    Raises:
        CheckpointMismatchError: missing / unexpected keys or other shapes (first five of each named).
    """
    own = model.state_dict()
    shapes = sorted(f'{k}: checkpoint {tuple(state[k].shape)} vs config {tuple(own[k].shape)}'
                    for k in set(own) & set(state) if tuple(own[k].shape) != tuple(state[k].shape))
    missing, unexpected = [], []
    if not shapes:  # load non-strictly first: module hooks may fill keys that older checkpoints lack
        result = model.load_state_dict(state, strict=False)
        missing, unexpected = sorted(result.missing_keys), sorted(result.unexpected_keys)
    else:
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected or shapes:
        parts = []
        for kind, items in (('missing', missing), ('unexpected', unexpected), ('different shapes', shapes)):
            if items:
                more = f' (+{len(items) - 5} more)' if len(items) > 5 else ''
                parts.append(f'{kind}: {items[:5]}{more}')
        raise CheckpointMismatchError(f'{what} {path!r} does not belong to config {config!r} ('
                                      + '; '.join(parts) + ')')
    return model


def load_weights(model, path, config, what='checkpoint'):
    """Read ``path`` and load it strictly into ``model`` (:func:`read_state_dict`, :func:`load_state_strict`);
    returns the checkpoint dict."""
    ckpt, state = read_state_dict(path, what)
    load_state_strict(model, state, path, config, what)
    return ckpt


__all__ = ['CheckpointMismatchError', 'read_state_dict', 'load_state_strict', 'load_weights']
