"""Small constant tensors made once per CUDA device, so that a CUDA graph can be captured.

``torch.tensor(values, device='cuda')`` copies from the host and waits for the copy, which a CUDA graph capture
forbids. :func:`const` returns ``torch.tensor(values, dtype=dtype, device=device)``; on a CUDA device it is made
once per ``(values, dtype, device)`` and reused, so a capture that follows a warm-up run copies nothing from the
host. Callers treat the result as read-only. On other devices, and while a graph is traced, scripted, compiled or
exported, it is made anew on every call (exported graphs keep their inline constants).
"""
import threading

import torch

_CACHE = {}
_LOCK = threading.Lock()
_MAX_ENTRIES = 4096


def _frozen(values):
    """A hashable key of nested sequences of Python scalars that tells 1, 1.0 and True apart."""
    if isinstance(values, (list, tuple)):
        return tuple(_frozen(v) for v in values)
    if isinstance(values, torch.Tensor):
        raise TypeError('const: values must be Python scalars or sequences of them, got a tensor')
    return type(values).__name__, values


def const(values, dtype=None, device=None):
    """``torch.tensor(values, dtype=dtype, device=device)``, cached on CUDA devices (read-only; see the module).

    Args:
        values (scalar | Sequence): Python numbers (nested sequences allowed).
        dtype (torch.dtype, optional): as ``torch.tensor``.
        device (torch.device | str, optional): default CPU.
    Returns:
        Tensor
    """
    device = torch.device('cpu') if device is None else torch.device(device)
    if device.type != 'cuda' or (torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting()
                                 or torch.onnx.is_in_onnx_export()):
        return torch.tensor(values, dtype=dtype, device=device)
    key = (_frozen(values), dtype, device)
    found = _CACHE.get(key)
    if found is None:
        found = torch.tensor(values, dtype=dtype, device=device)
        with _LOCK:
            if len(_CACHE) >= _MAX_ENTRIES:
                _CACHE.clear()
            _CACHE[key] = found
    return found


__all__ = ['const']
