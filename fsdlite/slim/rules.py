"""How channel labels flow through the ops a model runs (aten and custom ops), for :mod:`fsdlite.slim.trace`.

Rules, chosen per op:

* **views / data movement** (``view``, ``cat``, ``index_select``, ``index``, ``gather``, padding, ...): the
  same op is applied to the label tensors, so labels move with their values;
* **point-wise** (``torch.Tag.pointwise``): element-wise union of the broadcast labels;
* **reductions** (``torch.Tag.reduction`` and friends): union along the reduced dims, emptied by
  :func:`~fsdlite.slim.labels.drop_if_full_reduction` when every output merged the same channels;
* **accumulating scatters** (``index_add``, ``scatter_add``, ``index_put(accumulate=True)``): union at the
  destination positions;
* **contractions** (``mm``, ``bmm``, ``addmm``, SDPA): the contracted channels of both operands are coupled
  pair by pair; outputs carry the free dimensions' labels;
* **custom ops** registered with :func:`register_op_rule` (fsdlite's own ops below).

Any other op that sees labelled inputs is handled conservatively: all its inputs' channels are frozen and
its outputs get one frozen label (reported by the tracer), so an unknown op can only make slimming
refuse a group, never break a model.
"""
import math

import torch

from .labels import drop_if_full_reduction

INDEX_ARGS = {'index', 'indices', 'mask', 'repeats', 'offsets', 'sorter', 'boundaries', 'neighbors'}
CREATION = {'zeros', 'ones', 'empty', 'full', 'new_zeros', 'new_ones', 'new_empty', 'new_full', 'zeros_like',
            'ones_like', 'empty_like', 'full_like', 'rand_like', 'randn_like', 'empty_strided',
            'new_empty_strided', 'arange', 'scalar_tensor', 'lift_fresh', 'lift_fresh_copy', 'eye', 'linspace',
            'rand', 'randn', 'randint', 'randperm', 'normal', 'uniform_', 'normal_', 'bernoulli_'}
MOVEMENT = {'index_select', 'cat', 'stack', 'index', 'gather', 'constant_pad_nd', 'repeat', 'flip', 'roll', 'take',
            'repeat_interleave', 'masked_select', '_unsafe_view', 'copy_', 'index_put', 'index_put_', 'scatter',
            'scatter_', 'fill_', 'zero_', 'index_fill', 'index_fill_', 'index_copy', 'index_copy_', 'masked_scatter',
            'masked_scatter_', 'tril', 'triu', 'narrow_copy', 'slice_copy', 'unfold', 'split_with_sizes_copy',
            'alias_copy', 'view_copy', 'expand_copy', 'permute_copy', 'transpose_copy', 'squeeze_copy',
            'unsqueeze_copy', 'unbind_copy', 'detach_copy', 'clone', '_to_copy'}
SAME_POSITION = {'_softmax', '_log_softmax', 'cumsum', 'cumprod', 'logcumsumexp', 'cummax', 'cummin'}
ALONG_DIM = {'sort', 'topk', 'kthvalue', 'median', 'mode', 'nanmedian'}
REDUCTIONS = {'sum', 'mean', 'amax', 'amin', 'max', 'min', 'prod', 'std', 'var', 'std_mean', 'var_mean',
              'logsumexp', 'linalg_vector_norm', 'norm', 'nansum', 'nanmean', 'aminmax', 'any', 'all'}
ACCUMULATE = {'index_add', 'index_add_', 'scatter_add', 'scatter_add_', 'scatter_reduce', 'scatter_reduce_',
              'index_reduce', 'index_reduce_'}
CONTRACTIONS = {'mm', 'addmm', 'bmm', 'baddbmm', 'dot', 'mv', 'addmv'}
SDPA = {'_scaled_dot_product_flash_attention_for_cpu', '_scaled_dot_product_attention_math',
        '_scaled_dot_product_efficient_attention', '_scaled_dot_product_flash_attention',
        '_scaled_dot_product_cudnn_attention'}
NORMS = {'native_layer_norm': -1, 'native_batch_norm': 1, '_native_batch_norm_legit_no_training': 1,
         '_native_batch_norm_legit': 1, 'native_group_norm': 1}

_OP_RULES = {}


def register_op_rule(name, rule):
    """Register ``rule(tracer, bound_args, outputs)`` for the op ``name`` (``'namespace::op'``).

    ``bound_args`` maps schema argument names to values; the rule reads labels with ``tracer.label(t)``
    and assigns output labels with ``tracer.set_label(t, labels)``.
    """
    _OP_RULES[name] = rule


def is_float(t):
    """True for a floating-point or complex tensor (the tensors that carry labels)."""
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def bind(func, args, kwargs):
    """Schema argument name -> value (defaults filled in)."""
    bound = {}
    for arg, value in zip(func._schema.arguments, args):
        bound[arg.name] = value
    bound.update(kwargs)
    for arg in func._schema.arguments:
        if arg.name not in bound and arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def flat_outputs(out):
    """An op's output as a list (tuple / list outputs unpacked, a single output wrapped)."""
    return list(out) if isinstance(out, (tuple, list)) else [out]


def float_args(args, kwargs):
    """The float tensors among positional and keyword arguments (one level of lists / tuples unpacked)."""
    items = list(args) + list(kwargs.values())
    flat = []
    for a in items:
        flat.extend(a if isinstance(a, (list, tuple)) else [a])
    return [a for a in flat if is_float(a)]


# ---------------------------------------------------------------------------------------- generic rules
def movement(tracer, func, args, kwargs, out):
    """Apply ``func`` to the label tensors (non-index tensor arguments replaced by their labels)."""
    name = func._schema.name.split('::')[-1]
    if name in ('clone', '_to_copy'):
        src = args[0]
        for o in flat_outputs(out):
            if is_float(o):
                tracer.set_label(o, tracer.label(src).reshape(o.shape) if is_float(src) else None)
        return
    schema = func._schema.arguments

    def sub(value, arg=None):
        if isinstance(value, (list, tuple)):
            return type(value)(sub(v, arg) for v in value)
        if isinstance(value, torch.Tensor):
            if arg is not None and arg.name in INDEX_ARGS:
                return value
            return tracer.label(value) if is_float(value) else torch.zeros(value.shape, dtype=torch.int64)
        if arg is not None and isinstance(value, (float, int)) and not isinstance(value, bool) and \
                str(arg.type) in ('Scalar', 'float', 'Optional[Scalar]', 'Scalar?'):
            return 0
        return value

    new_args = [sub(v, schema[i] if i < len(schema) else None) for i, v in enumerate(args)]
    by_name = {a.name: a for a in schema}
    new_kwargs = {k: sub(v, by_name.get(k)) for k, v in kwargs.items()}
    try:
        result = func(*new_args, **new_kwargs)
    except RuntimeError:  # a view the label tensor's layout does not allow: drop aliasing, keep labels
        new_args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in new_args]
        result = func(*new_args, **new_kwargs)
    for o, lab in zip(flat_outputs(out), flat_outputs(result)):
        if is_float(o) and isinstance(lab, torch.Tensor):
            tracer.set_label(o, lab)


def pointwise(tracer, func, args, kwargs, out):
    """Element-wise union of the broadcast labels of every floating-point argument."""
    outs = [o for o in flat_outputs(out) if is_float(o)]
    if not outs:
        return
    shape = outs[0].shape
    labels = []
    for t in float_args(args, kwargs):
        lab = tracer.label(t, create=False)
        if lab is not None and t.numel() > 1:
            try:
                labels.append(torch.broadcast_to(lab, shape))
            except RuntimeError:
                return conservative(tracer, func, args, kwargs, out)
    result = tracer.store.combine(labels)
    for o in outs:
        if o.shape == shape:
            tracer.set_label(o, result)


def _reduce(tracer, label, dims, keepdim):
    """Union of ``label`` over ``dims``; returns the reduced label tensor."""
    nd = label.dim()
    dims = sorted({d % nd for d in dims}) if nd else []
    keep = [d for d in range(nd) if d not in dims]
    moved = label.permute(*keep, *dims) if nd else label.reshape(1)
    rows = moved.reshape(-1, math.prod(label.shape[d] for d in dims) if dims else 1)
    reduced, merged = tracer.store.reduce_rows(rows)
    reduced = drop_if_full_reduction(reduced, merged)
    shape = [label.shape[d] for d in keep]
    out = reduced.view(shape) if shape else reduced.view(())
    if keepdim:
        for d in dims:
            out = out.unsqueeze(d)
    return out


def reduction(tracer, func, args, kwargs, out):
    """Reduction rule: union of the labels along the reduced dims (all when ``dim`` is unset or empty), emptied
    for a full channel reduction; inputs that are not float or have no label are skipped."""
    b = bind(func, args, kwargs)
    src = b.get('self', b.get('input'))
    if not is_float(src):
        return
    label = tracer.label(src, create=False)
    if label is None:
        return
    dims = b.get('dim')
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        dims = list(range(src.dim()))
    elif isinstance(dims, int):
        dims = [dims]
    result = _reduce(tracer, label, list(dims), bool(b.get('keepdim', False)))
    for o in flat_outputs(out):
        if is_float(o):
            tracer.set_label(o, result.reshape(o.shape))


def along_dim(tracer, func, args, kwargs, out):
    """sort / topk along a dimension: positions lose their channel identity -> union along it."""
    b = bind(func, args, kwargs)
    src = b['self']
    label = tracer.label(src, create=False)
    if label is None:
        return
    dim = b.get('dim', -1) % max(src.dim(), 1)
    merged = _reduce(tracer, label, [dim], True)
    for o in flat_outputs(out):
        if is_float(o):
            tracer.set_label(o, merged.expand(o.shape))


def same_position(tracer, func, args, kwargs, out):
    """softmax / cumsum: output position i corresponds to input position i."""
    label = tracer.label(args[0], create=False)
    if label is not None:
        tracer.set_label(flat_outputs(out)[0], label)


def _scatter_union(tracer, target, dest, src):
    """Union labels ``src`` into the flat positions ``dest`` of the flat label tensor ``target`` (in place)."""
    dest, src = dest.reshape(-1), src.reshape(-1)
    keep = src > 0
    dest, src = dest[keep], src[keep]
    if dest.numel() == 0:
        return
    base = len(tracer.store.sets) + 1
    pairs = torch.unique(torch.cat([dest * base + src, dest * base + target[dest]]))
    pd, ps = pairs // base, pairs % base
    uniq, counts = torch.unique_consecutive(pd, return_counts=True)
    width = int(counts.max())
    starts = torch.cumsum(counts, 0) - counts
    col = torch.arange(pd.numel()) - torch.repeat_interleave(starts, counts)
    matrix = torch.zeros(uniq.numel(), width, dtype=torch.int64)
    matrix[torch.repeat_interleave(torch.arange(uniq.numel()), counts), col] = ps
    target[uniq] = tracer.store.reduce_rows(matrix)[0]


def accumulate(tracer, func, args, kwargs, out):
    """index_add / scatter_add / scatter_reduce / index_reduce: union at the destination positions."""
    b = bind(func, args, kwargs)
    name = func._schema.name.split('::')[-1]
    self_t = b['self']
    src = b.get('source', b.get('src'))
    if not is_float(self_t):
        return
    result = tracer.label(self_t).reshape(-1).clone()
    if is_float(src) and tracer.label(src, create=False) is not None:
        pos = torch.arange(self_t.numel()).view(self_t.shape)
        dim = b['dim'] % max(self_t.dim(), 1)
        if name.startswith('index_'):
            dest = pos.index_select(dim, b['index'])
            lab = tracer.label(src).expand(dest.shape) if src.dim() == 0 else tracer.label(src)
        else:
            index = b['index']
            dest = pos.gather(dim, index)
            lab = tracer.label(src)[tuple(slice(0, s) for s in index.shape)]
        _scatter_union(tracer, result, dest, lab)
    o = flat_outputs(out)[0]
    tracer.set_label(o, result.view(self_t.shape))


def index_put(tracer, func, args, kwargs, out):
    """``index_put``: as :func:`movement` unless ``accumulate=True``, then the value labels are united into the
    destination positions."""
    b = bind(func, args, kwargs)
    if not b.get('accumulate', False):
        return movement(tracer, func, args, kwargs, out)
    self_t, values = b['self'], b['values']
    result = tracer.label(self_t).reshape(-1).clone()
    if is_float(values) and tracer.label(values, create=False) is not None:
        dest = torch.arange(self_t.numel()).view(self_t.shape)[tuple(b['indices'])]
        _scatter_union(tracer, result, dest, torch.broadcast_to(tracer.label(values), dest.shape))
    tracer.set_label(flat_outputs(out)[0], result.view(self_t.shape))


def _columns(tracer, t, dims_first):
    """(C,) union of the labels of each position of the last ``t.dim() - dims_first`` dims over the first ones."""
    lab = tracer.label(t)
    rows = lab.reshape(-1, *lab.shape[dims_first:]).reshape(lab.shape[:dims_first].numel(), -1)
    return tracer.store.reduce_rows(rows.t().contiguous())[0].view(lab.shape[dims_first:])


def _rows(tracer, t, dims_last):
    """Union over the last ``dims_last`` dims for each leading position, emptied for full channel reductions."""
    lab = tracer.label(t)
    lead = lab.shape[:lab.dim() - dims_last]
    labels, merged = tracer.store.reduce_rows(lab.reshape(lead.numel(), -1))
    return drop_if_full_reduction(labels, merged).view(lead)


def contraction(tracer, func, args, kwargs, out):
    """mm-like products: couple contracted channels pair by pair; outputs keep free-dimension labels."""
    b = bind(func, args, kwargs)
    name = func._schema.name.split('::')[-1]
    a, m = (b['self'], b.get('mat2', b.get('vec', b.get('tensor')))) if name in ('mm', 'bmm', 'dot', 'mv') else \
        (b.get('mat1', b.get('batch1', b.get('mat'))), b.get('mat2', b.get('batch2', b.get('vec'))))
    if not (is_float(a) and is_float(m)):
        return conservative(tracer, func, args, kwargs, out)
    a_lab, m_lab = tracer.label(a), tracer.label(m)
    batched = a.dim() == 3
    k_a = a_lab.movedim(-1, 0).reshape(a.shape[-1], -1)
    k_m = (m_lab.movedim(-2, 0) if m.dim() >= 2 else m_lab.unsqueeze(-1)).reshape(a.shape[-1], -1)
    store = tracer.store
    store.commit_pairs(store.reduce_rows(k_a)[0].tolist(), store.reduce_rows(k_m)[0].tolist())
    o = flat_outputs(out)[0]
    rows = _rows(tracer, a, 1)                                      # (n,) or (B, n)
    if m.dim() == 1:
        result = rows
    else:
        cols_lab = m_lab.transpose(-1, -2)
        lead = cols_lab.shape[:-1]
        labels, merged = store.reduce_rows(cols_lab.reshape(lead.numel(), -1))
        cols = drop_if_full_reduction(labels, merged).view(lead)    # (m,) or (B, m)
        result = store.combine([torch.broadcast_to(rows.unsqueeze(-1), o.shape),
                                torch.broadcast_to(cols.unsqueeze(-2) if batched or cols.dim() == 1 else cols,
                                                   o.shape)])
    bias = b.get('self') if name in ('addmm', 'baddbmm', 'addmv') else None
    if is_float(bias) and tracer.label(bias, create=False) is not None:
        result = store.combine([result, torch.broadcast_to(tracer.label(bias), o.shape)])
    tracer.set_label(o, result)


def sdpa(tracer, func, args, kwargs, out):
    """Scaled dot-product attention: q/k channels coupled; output channels = value channels."""
    b = bind(func, args, kwargs)
    q, k, v = b['query'], b['key'], b['value']
    store = tracer.store
    store.commit_pairs(_columns(tracer, q, q.dim() - 1).tolist(), _columns(tracer, k, k.dim() - 1).tolist())
    o = flat_outputs(out)[0]
    tracer.set_label(o, torch.broadcast_to(_columns(tracer, v, v.dim() - 1), o.shape))


def norm_functional(tracer, func, args, kwargs, out):
    """Functional norms: per-channel parameters aligned with the channel dim, union element-wise."""
    name = func._schema.name.split('::')[-1]
    b = bind(func, args, kwargs)
    x = b['input']
    o = flat_outputs(out)[0]
    dim = NORMS[name] % x.dim()
    labels = [tracer.label(x)]
    for key in ('weight', 'bias', 'running_mean', 'running_var'):
        p = b.get(key)
        if is_float(p) and p.dim() == 1 and tracer.label(p, create=False) is not None:
            shape = [1] * x.dim()
            shape[dim] = p.shape[0]
            labels.append(torch.broadcast_to(tracer.label(p).view(shape), x.shape))
    tracer.set_label(o, tracer.store.combine(labels))


def conservative(tracer, func, args, kwargs, out):
    """Unknown op with labelled inputs: freeze every input channel; outputs get one frozen label."""
    labels = [tracer.label(t, create=False) for t in float_args(args, kwargs)]
    labels = [lab for lab in labels if lab is not None]
    if not any(bool(lab.any()) for lab in labels):
        return
    store = tracer.store
    label = store.union(torch.unique(torch.cat([lab.reshape(-1) for lab in labels])).tolist())
    node = store.commit(label)
    store.freeze(label)
    tracer.conservative[func._schema.name] += 1
    for o in flat_outputs(out):
        if is_float(o):
            tracer.set_label(o, torch.full(o.shape, store.label_of((node,)), dtype=torch.int64))


def no_channels(tracer, func, args, kwargs, out):
    """Ops on coordinates/indices (voxelize, iou, nms, ...): outputs carry no channel identity."""


def _rule_for_name(name):
    if name in CREATION:
        return no_channels
    if name in ACCUMULATE:
        return accumulate
    if name in ('index_put', 'index_put_'):
        return index_put
    if name in MOVEMENT:
        return movement
    if name in SAME_POSITION:
        return same_position
    if name in ALONG_DIM:
        return along_dim
    if name in CONTRACTIONS:
        return contraction
    if name in SDPA:
        return sdpa
    if name in NORMS:
        return norm_functional
    return None


def rule_for(func):
    """The rule function ``(tracer, func, args, kwargs, out)`` of an OpOverload."""
    full = func._schema.name
    if full in _OP_RULES:
        custom = _OP_RULES[full]
        return lambda tracer, f, args, kwargs, out: custom(tracer, bind(f, args, kwargs), out)
    ns, name = full.split('::') if '::' in full else ('', full)
    if ns == 'aten':
        got = _rule_for_name(name)
        if got is not None:
            return got
        if func.is_view:
            return movement
        tags = set(func.tags)
        if torch.Tag.pointwise in tags:
            return pointwise
        if torch.Tag.reduction in tags or name in REDUCTIONS:
            return reduction
    return conservative


__all__ = ['register_op_rule', 'rule_for', 'bind', 'is_float', 'flat_outputs']
