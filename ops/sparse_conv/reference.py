"""Pure-torch references of the sparse_conv family (slow, obviously correct; used by tests and benchmarks)."""
import torch


def pairs_by_offset_reference(nbr, num_in):
    """Offset-grouped pairs of a neighbour map, by Python loops: (2, P) [input row; output row], (K + 1,) starts.

    Entries of ``nbr`` (Vout, K) below ``num_in`` are pairs; the others mean "no neighbour".
    """
    ins, outs, starts = [], [], [0]
    rows = nbr.tolist()
    for k in range(nbr.shape[1]):
        for o, row in enumerate(rows):
            if row[k] < num_in:
                ins.append(row[k])
                outs.append(o)
        starts.append(len(ins))
    return torch.tensor([ins, outs], dtype=torch.long).view(2, -1), torch.tensor(starts, dtype=torch.long)


def sparse_conv_reference(features, weight, pairs, offset_starts, num_out):
    """``out[o] = sum over pairs (i, o) of offset k of features[i] @ weight[k]`` by one product per offset.

    Args:
        features (Tensor): (Vin, Cin).
        weight (Tensor): (K, Cin, Cout).
        pairs (Tensor): (2, P) int64 input rows, output rows.
        offset_starts (Tensor): (K + 1,) int64, offset k owns pairs ``[starts[k], starts[k + 1])``.
        num_out (int): output rows.
    Returns:
        Tensor: (num_out, Cout).
    """
    out = features.new_zeros(num_out, weight.shape[2])
    starts = offset_starts.tolist()
    for k in range(weight.shape[0]):
        lo, hi = starts[k], starts[k + 1]
        if hi > lo:
            out.index_add_(0, pairs[1, lo:hi], features[pairs[0, lo:hi]] @ weight[k])
    return out


def sparse_conv_weight_grad_reference(features, grad_out, pairs, offset_starts):
    """``grad_weight[k] = features[in_k]^T @ grad_out[out_k]`` over the pairs of each offset k, by one product per
    offset: (Vin, Cin), (Vout, Cout) -> (K, Cin, Cout)."""
    starts = offset_starts.tolist()
    grad_weight = features.new_zeros(len(starts) - 1, features.shape[1], grad_out.shape[1])
    for k in range(len(starts) - 1):
        lo, hi = starts[k], starts[k + 1]
        if hi > lo:
            grad_weight[k] = features[pairs[0, lo:hi]].t() @ grad_out[pairs[1, lo:hi]]
    return grad_weight
