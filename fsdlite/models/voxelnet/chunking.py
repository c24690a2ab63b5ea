"""Run a function over chunks of graphs, recomputing each chunk's activations in backward."""
import ctypes
import ctypes.util
import functools

import torch
from torch.utils.checkpoint import checkpoint


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    name = ctypes.util.find_library('c')
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
    return trim


def release_free_heap():
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    Chunk-sized CPU buffers (a few MB) are served from the glibc heap, where small long-lived objects
    (each chunk's output, autograd nodes) fragment the freed space; without trimming, the resident
    memory grows by a few MB per chunk although the live tensors stay bounded by one chunk.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def graphs_per_chunk(chunk_rows, nodes):
    """How many graphs of ``nodes`` nodes fit in ``chunk_rows`` rows (at least one)."""
    return max(1, int(chunk_rows) // max(1, int(nodes)))


def _trimmed(fn):
    @functools.wraps(fn)
    def run(*args):
        release_free_heap()      # also runs before each recomputation in backward
        return fn(*args)

    return run


def map_chunks(fn, pieces, *args, recompute=True):
    """``torch.cat([fn(piece, *args) for piece in pieces])`` with activation checkpointing.

    With ``recompute`` and grad enabled, each call keeps only its inputs and output for backward
    and reruns its forward there, so activation memory is bounded by one chunk.  Pass pieces made
    with ``tensor.split`` (one backward node assembles their gradients), not repeated slicing.
    With several CPU chunks, freed heap memory is returned to the OS before each chunk runs.

    Args:
        fn (callable): ``fn(piece, *args) -> Tensor`` with rows along dim 0.
        pieces (Sequence): chunk inputs (tensors or plain values such as ranges).
    Returns:
        Tensor: outputs concatenated along dim 0.
    """
    pieces = list(pieces)
    if len(pieces) > 1 and not any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        fn = _trimmed(fn)
    outputs = []
    for piece in pieces:
        if recompute and torch.is_grad_enabled():
            outputs.append(checkpoint(fn, piece, *args, use_reentrant=False))
        else:
            outputs.append(fn(piece, *args))
    return torch.cat(outputs)
