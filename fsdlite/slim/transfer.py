"""Weight transfer: slice a state dict to the kept channels of every layer."""
import torch


def kept_indices(graph, kept_units):
    """``{dim id: LongTensor of kept columns}`` for every dim of the graph."""
    return {d.id: torch.tensor(graph.kept_columns(d, kept_units), dtype=torch.long) for d in graph.dims}


def slice_tensor(t, slices):
    """Apply ``[(axis, view, view_axis, index)]`` channel selections to one parameter tensor."""
    shape = list(t.shape)
    viewed = [s for s in slices if s[1] is not None and t.dim() > 1]
    if viewed:  # spconv's 1x1 path multiplies by weight.view(Cin, Cout): slice that matrix
        m = t.reshape(viewed[0][1])
        for axis, _, view_axis, index in viewed:
            m = m.index_select(view_axis, index)
            shape[axis] = index.numel()
        t = m.reshape(shape)
    for axis, view, _, index in slices:
        if view is None or t.dim() <= 1:
            t = t.index_select(axis, index)
    return t.contiguous()


def slice_state_dict(state, graph, indices, keep_names=None):
    """The state dict of the slimmed model.

    Args:
        state (dict): original state dict.
        graph (ChannelGraph): traced graph (its dims name the parameters they slice).
        indices (dict): dim id -> kept column indices (:func:`kept_indices`).
        keep_names (set, optional): names present in the slimmed model (others, e.g. dropped blocks, are left out).
    Returns:
        dict: name -> tensor (clones; untouched tensors are copied as they are).
    """
    out = {}
    for name, t in state.items():
        if keep_names is not None and name not in keep_names:
            continue
        slices = []
        for d, axis, view, view_axis in graph.by_param.get(name, ()):
            index = indices[d.id]
            if index.numel() != d.size:
                slices.append((axis, view, view_axis, index))
        out[name] = slice_tensor(t, slices) if slices else t.clone()
    return out


__all__ = ['kept_indices', 'slice_tensor', 'slice_state_dict']
