"""Channel labels: every element of a traced tensor carries the set of channel *nodes* it comes from.

A node is one channel of a layer output (or of a declared parameter dimension). A *label* is an int64 id
of a frozen set of nodes (id 0 = the empty set: a value that carries no channel identity, e.g. raw input
data or a full reduction over channels). Shadow tensors of labels mirror the traced tensors element by
element (:mod:`fsdlite.slim.trace`); this module holds the set table and the vectorised operations on
label tensors:

* :meth:`LabelStore.combine` -- element-wise union of broadcast label tensors (point-wise ops);
* :meth:`LabelStore.reduce_rows` -- union along rows of a 2-D label matrix (reductions, leaf inputs);
* :meth:`LabelStore.commit` / :meth:`LabelStore.find` -- union-find over nodes: a committed set is a group
  of channels that must be kept or dropped together (a *unit*).
"""
import torch


class LabelStore:
    """Set table (label id -> frozenset of nodes) and union-find over nodes."""

    def __init__(self):
        self.sets = [frozenset()]
        self._ids = {frozenset(): 0}
        self._pair_cache = {}
        self.parent = []          # union-find over nodes
        self.frozen = set()       # nodes that must never be pruned (resolved through find)
        self.node_owner = []      # description of each node (leaf name, role, column)

    # ------------------------------------------------------------------ sets and nodes
    def new_nodes(self, count, owner):
        """Create ``count`` nodes owned by ``owner`` (a tuple naming the layer dimension); returns their label ids."""
        start = len(self.parent)
        labels = []
        for j in range(count):
            self.parent.append(start + j)
            self.node_owner.append((owner, j))
            labels.append(self.label_of(frozenset((start + j,))))
        return labels

    def label_of(self, nodes):
        """Label id of the frozenset ``nodes`` (registered on first use)."""
        nodes = frozenset(nodes)
        got = self._ids.get(nodes)
        if got is None:
            got = len(self.sets)
            self.sets.append(nodes)
            self._ids[nodes] = got
        return got

    def union(self, labels):
        """Label id of the union of the sets of ``labels`` (an iterable of ids)."""
        labels = [int(x) for x in labels if x]
        if not labels:
            return 0
        if len(labels) == 1:
            return labels[0]
        if len(labels) == 2:
            key = (min(labels), max(labels))
            got = self._pair_cache.get(key)
            if got is None:
                got = self._pair_cache[key] = self.label_of(self.sets[key[0]] | self.sets[key[1]])
            return got
        nodes = frozenset().union(*(self.sets[x] for x in labels))
        return self.label_of(nodes)

    def fork(self):
        """A copy whose union-find / frozen marks can change without affecting this store (sets are shared)."""
        other = LabelStore.__new__(LabelStore)
        other.__dict__.update(self.__dict__)
        other.parent = list(self.parent)
        other.frozen = set(self.frozen)
        other.sets, other._ids, other._pair_cache = list(self.sets), dict(self._ids), dict(self._pair_cache)
        return other

    # ------------------------------------------------------------------ union-find
    def find(self, node):
        """Representative node of ``node``'s unit (path halving)."""
        parent = self.parent
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    def _join(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def commit(self, label):
        """Join every node of ``label`` into one unit; returns one of its nodes (None for the empty set)."""
        nodes = self.sets[int(label)]
        if not nodes:
            return None
        it = iter(nodes)
        first = next(it)
        for n in it:
            self._join(first, n)
        return first

    def commit_pairs(self, labels_a, labels_b):
        """Join, position by position, the units of two equally long label sequences (both non-empty)."""
        for a, b in zip(labels_a, labels_b):
            if a and b:
                self.commit(self.union((a, b)))

    def freeze(self, label):
        """Mark every node of ``label`` as not prunable."""
        self.frozen.update(self.sets[int(label)])

    def frozen_roots(self):
        """Representatives of the frozen units."""
        return {self.find(n) for n in self.frozen}

    # ------------------------------------------------------------------ tensor operations
    def combine(self, labels):
        """Element-wise union of label tensors already broadcast to one shape (list of int64 tensors)."""
        labels = [x for x in labels if x is not None]
        if not labels:
            return None
        out = labels[0]
        for other in labels[1:]:
            out = self._combine2(out, other)
        return out

    def _combine2(self, a, b):
        if a is b:
            return a
        if not bool(b.any()):
            return a
        if not bool(a.any()):
            return b
        if torch.equal(a, b):
            return a
        base = len(self.sets)
        keys = a.reshape(-1) * base + b.reshape(-1)
        uniq, inverse = torch.unique(keys, return_inverse=True)
        table = torch.tensor([self.union((int(k) // base, int(k) % base)) for k in uniq.tolist()],
                             dtype=torch.int64)
        return table[inverse].view(a.shape)

    def reduce_rows(self, matrix):
        """Union of each row of a (P, R) label matrix.

        Returns:
            tuple: ``(labels (P,), merged (P,) bool)`` where ``merged`` marks rows whose union combined
            two or more distinct non-empty labels (a reduction that mixed channels).
        """
        p, r = matrix.shape
        if r == 0 or p == 0:
            return torch.zeros(p, dtype=torch.int64), torch.zeros(p, dtype=torch.bool)
        ordered, _ = matrix.sort(dim=1)
        out = ordered[:, -1].clone()
        merged = torch.zeros(p, dtype=torch.bool)
        first_nonzero = torch.where(ordered > 0, ordered, torch.full_like(ordered, torch.iinfo(torch.int64).max))
        lo = first_nonzero.min(dim=1).values
        multi = (lo != ordered[:, -1]) & (ordered[:, -1] > 0)
        if bool(multi.any()):
            rows = ordered[multi]
            uniq, inverse = torch.unique(rows, dim=0, return_inverse=True)
            ids, mixed = [], []
            for row in uniq.tolist():
                distinct = sorted({x for x in row if x})
                ids.append(self.union(distinct))
                mixed.append(len(distinct) > 1)
            out[multi] = torch.tensor(ids, dtype=torch.int64)[inverse]
            merged[multi] = torch.tensor(mixed, dtype=torch.bool)[inverse]
        return out, merged


def drop_if_full_reduction(labels, merged):
    """Labels of a reduction result, emptied when it is a *full* reduction over channels.

    A reduction that merged channels into one single set for every output (e.g. ``x.sum(-1)``, a norm over
    channels, the channel contraction of ``q @ k.T``) leaves values with no channel identity: pruning some
    of those channels changes the value, not the shape. Partial reductions that give each output its own
    set (``x.view(V, C // 2, 2).sum(2)``) keep their labels: they tie channel groups together.
    """
    if labels.numel() == 0:
        return labels
    nonzero = labels[labels > 0]
    if nonzero.numel() and bool(merged[labels > 0].all()) and bool((nonzero == nonzero[0]).all()):
        return torch.zeros_like(labels)
    return labels


__all__ = ['LabelStore', 'drop_if_full_reduction']
