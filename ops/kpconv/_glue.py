"""Fake-tensor and autograd glue shared by the kernel-point ops (kpconv, kp_aggregate).

Both schemas read ``op(q_pts, s_pts, neighbors, features, kernel_points, t5, t6, sigma, influence,
aggregation)`` (seven tensors, t6 optional) with a backward op
``op_backward(grad_out, <the seven tensors>, sigma, influence, aggregation, output_mask)`` that returns one
gradient per differentiable input, an empty ``(0,)`` tensor where it was not requested or the input is absent.
"""
import torch

from .. import _checks
from ..build import register_autograd

NUM_TENSORS = 7  # q_pts, s_pts, neighbors, features, kernel_points, t5, t6
NUM_INPUTS = 10  # + sigma, influence, aggregation


def grad_fakes(features, inputs, mask):
    """Fake gradients of ``inputs`` under ``mask``: ``t``'s shape where requested and present, else ``(0,)``.

    Args:
        features (Tensor): (N, C) features of the call (gives dtype/device of the empty ones).
        inputs (list): the differentiable inputs (Tensor or None), in the backward op's output order.
        mask (list[bool]): requested gradients, same order.
    Returns:
        tuple[Tensor]: one (fake) tensor per input.
    """
    return tuple(t.new_empty(t.shape) if (t is not None and m) else features.new_empty((0,))
                 for t, m in zip(inputs, mask))


def register_kp_autograd(op, grad_positions):
    """Register ``fsdlite::<op>_backward``'s fake and the autograd of ``fsdlite::<op>``.

    Args:
        op (str): op name (``'kpconv'`` or ``'kp_aggregate'``).
        grad_positions (tuple[int]): positions among the forward's inputs (0-6) of the differentiable
            tensors, in the order ``<op>_backward`` returns their gradients.
    """
    def backward_fake(grad_out, q_pts, s_pts, neighbors, features, kernel_points, t5, t6, sigma, influence,
                      aggregation, output_mask):
        tensors = (q_pts, s_pts, neighbors, features, kernel_points, t5, t6)
        return grad_fakes(features, [tensors[i] for i in grad_positions], output_mask)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:NUM_TENSORS])
        ctx.params = tuple(inputs[NUM_TENSORS:])

    def backward(ctx, grad_out):
        saved = ctx.saved_tensors
        mask = [bool(ctx.needs_input_grad[i]) and saved[i] is not None for i in grad_positions]
        grads = [None] * NUM_INPUTS
        if any(mask):
            backward_op = getattr(torch.ops.fsdlite, f'{op}_backward')
            for i, g, m in zip(grad_positions, backward_op(grad_out, *saved, *ctx.params, mask), mask):
                grads[i] = g if m else None
        return tuple(grads)

    _checks.register_fake(f'fsdlite::{op}_backward')(backward_fake)
    register_autograd(f'fsdlite::{op}', backward, setup_context=setup_context)
