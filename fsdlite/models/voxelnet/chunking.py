"""Run a function over chunks of graphs, recomputing each chunk's activations in backward."""
import torch
from torch.utils.checkpoint import checkpoint


def graphs_per_chunk(chunk_rows, nodes):
    """How many graphs of ``nodes`` nodes fit in ``chunk_rows`` rows (at least one)."""
    return max(1, int(chunk_rows) // max(1, int(nodes)))


def map_chunks(fn, pieces, *args, recompute=True):
    """``torch.cat([fn(piece, *args) for piece in pieces])`` with activation checkpointing.

    With ``recompute`` and grad enabled, each call keeps only its inputs and output for backward
    and reruns its forward there, so activation memory is bounded by one chunk.  Pass pieces made
    with ``tensor.split`` (one backward node assembles their gradients), not repeated slicing.

    Args:
        fn (callable): ``fn(piece, *args) -> Tensor`` with rows along dim 0.
        pieces (Iterable): chunk inputs (tensors or plain values such as ranges).
    Returns:
        Tensor: outputs concatenated along dim 0.
    """
    outputs = []
    for piece in pieces:
        if recompute and torch.is_grad_enabled():
            outputs.append(checkpoint(fn, piece, *args, use_reentrant=False))
        else:
            outputs.append(fn(piece, *args))
    return torch.cat(outputs)
