"""Pure-torch reference of knn_aggregate (materialises the (Nq, k, F) tensor; for tests and benchmarks)."""
import torch


def knn_aggregate_reference(features, index, weights):
    """Weighted mean and max of neighbour rows.

    Args:
        features (Tensor): (Ns, F) floating.
        index (Tensor): (Nq, k) int64 in ``[0, Ns]``; ``Ns`` marks a padded (missing) neighbour.
        weights (Tensor): (Nq, k), same dtype as ``features``.
    Returns:
        tuple: ``mean`` (Nq, F) = sum of ``weights * features[index]`` over valid slots / their count
        (0 without valid slot), ``max`` (Nq, F) over valid slots (NaN never wins, ties -> first slot,
        0 without candidate; its gradient goes to the winning slot only) and ``argmax`` (Nq, F) int64
        winning slot (k without candidate).
    """
    ns, width = features.shape
    nq, k = index.shape
    valid = index != ns
    padded = torch.cat([features, features.new_zeros(1, width)])
    values = weights.unsqueeze(-1) * padded[index]                          # (Nq, k, F)
    count = valid.sum(1, keepdim=True)
    total = torch.where(valid.unsqueeze(-1), values, torch.zeros_like(values)).sum(1)
    mean = torch.where(count > 0, total / count.clamp(min=1).to(values.dtype), torch.zeros_like(total))
    candidate = valid.unsqueeze(-1) & ~torch.isnan(values)
    masked = torch.where(candidate, values, torch.full_like(values, float('-inf')))
    best = masked.amax(1, keepdim=True) if k else masked.sum(1, keepdim=True)
    slots = torch.arange(k, device=index.device).view(1, k, 1).expand(nq, k, width)
    winner = candidate & (masked == best)
    argmax = torch.where(winner, slots, torch.full_like(slots, k)).amin(1) if k else \
        torch.full((nq, width), k, dtype=torch.long, device=index.device)
    has = argmax < k
    # gather the winner so autograd routes the max gradient to the first winning slot only
    winner_values = values.gather(1, argmax.clamp(max=max(k - 1, 0)).unsqueeze(1)).squeeze(1) if k else mean
    maximum = torch.where(has, winner_values, torch.zeros_like(mean))
    return mean, maximum, argmax
