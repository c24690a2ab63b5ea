"""Channel graph: the traced model as *dimensions* (a layer's input/output/per-channel axis) whose columns
belong to *units* (channels that must be kept or dropped together).

A unit is a union-find class of channel nodes (:mod:`fsdlite.slim.labels`); a column of a layer's input
may hold several channels of one unit (e.g. the grouped shortcut sum of the sparse UNet, or the same
channel concatenated twice). Frozen units can never be dropped: channels of parameters without a spec,
outputs nobody consumes (heads' class/box outputs), and per-channel layers fed by raw inputs.
"""
from dataclasses import dataclass, field
from typing import List, Optional

from .specs import resolve_param


@dataclass
class Dim:
    """One channel axis of one layer."""

    id: int
    leaf: str                      #: module name
    role: str                      #: 'in' | 'out' | 'chan' | 'param'
    units: List[Optional[int]]     #: per column: unit (root node) or None (a constant input column)
    #: [(qualified param name, axis, matrix view (Cin, Cout) or None, axis in that view)]
    params: list = field(default_factory=list)
    order: int = 0                 #: call order of the layer in the traced forward

    @property
    def size(self):
        """Number of columns (channels) of the axis."""
        return len(self.units)

    @property
    def constrained(self):
        """Widths of out/chan/param dims are set by the config; in-dims follow from their producers."""
        return self.role != 'in'

    def __str__(self):
        return f'{self.leaf} ({self.role}, {self.size} channels)'


def _qualified(leaf, pname):
    return f'{leaf}.{pname}' if leaf else pname


class ChannelGraph:
    """Dimensions, units and frozen units of a traced model (built by :meth:`from_tracer`)."""

    def __init__(self, dims, frozen, unexercised, conservative_ops):
        self.dims = dims
        self.frozen = frozen
        self.unexercised = unexercised
        self.conservative_ops = conservative_ops
        self.members = {}
        for d in dims:
            for col, u in enumerate(d.units):
                if u is not None:
                    self.members.setdefault(u, []).append((d.id, col))
        self.by_param = {}
        for d in dims:
            for pname, axis, view, view_axis in d.params:
                self.by_param.setdefault(pname, []).append((d, axis, view, view_axis))

    @classmethod
    def from_tracer(cls, tracer, store=None):
        """Resolve the tracer's records into dims and units (``store``: a fork of the tracer's label store)."""
        store = store or tracer.store
        dims, unexercised = [], []

        def roots(labels):
            out = []
            for lab in labels:
                node = store.commit(lab) if lab else None
                out.append(store.find(node) if node is not None else None)
            return out

        def params_of(rec, mapping, view_axis):
            view = rec.spec.matrix_view(rec.module) if rec.spec.matrix_view else None
            got = []
            for pname, axis in mapping.items():
                if resolve_param(rec.module, pname) is not None:
                    got.append((_qualified(rec.name, pname), axis, view, view_axis))
            return got

        const_chan = set()
        for rec in tracer.leaves.values():
            spec = rec.spec
            if spec.kind == 'params':
                for pname, labels in rec.param_nodes.items():
                    dims.append(Dim(len(dims), rec.name, 'param', roots(labels),
                                    [(_qualified(rec.name, pname), spec.params[pname], None, None)],
                                    order=10 ** 9))
                continue
            if not rec.nonempty_calls:
                unexercised.append(rec.name)
                continue
            width = len(rec.in_labels[0])
            merged = [store.union(call[c] for call in rec.in_labels) for c in range(width)]
            if spec.kind == 'producer':
                dims.append(Dim(len(dims), rec.name, 'in', roots(merged), params_of(rec, spec.in_params, 0),
                                rec.order))
                dims.append(Dim(len(dims), rec.name, 'out', roots(rec.out_nodes),
                                params_of(rec, spec.out_params, 1), rec.order))
            else:
                units = roots(rec.chan_nodes)
                const_chan.update(u for u, lab in zip(units, merged) if not lab)
                dims.append(Dim(len(dims), rec.name, 'chan', units,
                                [(_qualified(rec.name, p), a, None, None) for p, a in spec.params.items()
                                 if resolve_param(rec.module, p) is not None], rec.order))
        consumed = {u for d in dims if d.role == 'in' for u in d.units if u is not None}
        created = {u for d in dims if d.constrained for u in d.units}
        in_outputs = {store.find(n) for lab in tracer.output_labels for n in store.sets[lab]}
        # channels that leave the model without feeding another layer (class / box outputs) keep their width
        frozen = store.frozen_roots() | const_chan | ((created & in_outputs) - consumed)
        return cls(dims, frozen, unexercised, dict(tracer.conservative))

    def dim_of(self, leaf, role):
        """The first dim of layer ``leaf`` with role ``role``, or None."""
        for d in self.dims:
            if d.leaf == leaf and d.role == role:
                return d
        return None

    def kept_columns(self, dim, kept_units):
        """Indices of ``dim``'s columns whose unit is kept (constant columns always are)."""
        return [c for c, u in enumerate(dim.units) if u is None or u in kept_units]

    def groups(self, dim_ids=None):
        """Connected sets of dims (dims sharing a unit), as lists of dim ids."""
        parent = {d.id: d.id for d in self.dims}

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for mem in self.members.values():
            first = find(mem[0][0])
            for dim_id, _ in mem[1:]:
                r = find(dim_id)
                if r != first:
                    parent[r] = first
        out = {}
        for d in self.dims:
            if dim_ids is None or d.id in dim_ids:
                out.setdefault(find(d.id), []).append(d.id)
        return list(out.values())


__all__ = ['Dim', 'ChannelGraph']
