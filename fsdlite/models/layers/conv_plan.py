"""Kernel maps of a sparse-conv network: every conv's geometry in execution order and the maps built from it.

A network that is a plain stack of sparse convs (``SparseUNet``, the FSDv2 mixer) hands out a :class:`ConvPlan`
(``network.conv_plan()``): the conv modules in execution order with the resolution level each writes. The plan
builds the kernel maps of one batch of voxels, in the forms the runs need:

* :meth:`ConvPlan.exact_kernel_maps` -- exact :class:`~fsdlite.models.layers.sparse_conv.KernelMap` of every conv
  (the eager forward on fsdlite's fused kernels; the deploy pre-ops tile them into pair lists);
* :meth:`ConvPlan.build_rulebooks` -- padded (V_level, K) neighbour maps at level bounds (fixed-shape runs; also
  in-graph through an export-safe ``ops``), cut to smaller bounds by :meth:`ConvPlan.shrink_rulebooks`, read as
  dense kernel maps by :meth:`ConvPlan.dense_kernel_maps`;
* :meth:`ConvPlan.build_pair_lists` / :meth:`ConvPlan.pair_lists_from_exact` -- (3, P) pair lists under pair
  bounds (one per :meth:`ConvPlan.pair_slots` entry), read as tiled kernel maps by
  :meth:`ConvPlan.tiled_kernel_maps`; a submanifold conv's centre offset (:func:`centre_offset`) is left out of
  the lists and of the pair counts and bounds: the tiled conv runs it as one plain product.

Submanifold convs of a level share one map; an inverse conv takes its strided conv's pairs, swapped.
"""
import math

import torch

from fsdlite.utils.constants import const

from .pair_conv import pairs_from_exact, pairs_from_nbr, without_offset_column
from .rulebook_conv import build_rulebook, conv_geometry, inverse_rulebook, output_grid
from .sparse_conv import KernelMap
from .sparse_tensor import SparseTensor, given_map, map_key

_ROWS = {'subm': (0, 0), 'conv': (-1, 0), 'inverse': (0, -1)}  # (input, output) level relative to the block's


def centre_offset(geometry):
    """The kernel offset through which a submanifold conv pairs every row with itself (its centre, ``K // 2`` with
    odd kernel sizes), or ``None`` for other convs. Pair lists leave its pairs out and the tiled conv runs it as one
    plain product (``KernelMap.identity_offset``)."""
    if geometry.kind != 'subm' or any(int(k) % 2 == 0 for k in geometry.kernel_size):
        return None
    return math.prod(int(k) for k in geometry.kernel_size) // 2


class ConvPlan:
    """The convs of a network in execution order and the kernel maps they need.

    Args:
        blocks (Sequence[tuple]): ``(conv module, level)`` per conv in execution order; ``level`` is the block's
            UNet level (a strided conv of level ``s`` reads level ``s - 1``, its inverse writes it).
        sparse_shape (Sequence[int]): (nz, ny, nx) grid of level 0.
        num_levels (int): S, the levels (one voxel bound each).
    """

    def __init__(self, blocks, sparse_shape, num_levels):
        self.modules = [conv for conv, _ in blocks]
        self.geometries = [conv_geometry(conv) for conv in self.modules]
        self.levels = [int(level) for _, level in blocks]
        self.sparse_shape = tuple(int(v) for v in sparse_shape)
        self.num_levels = int(num_levels)
        # grid (nz, ny, nx) and stride of every level, from the strided convs (a plan constant)
        self.level_shapes, self.level_strides = {0: self.sparse_shape}, {0: (1, 1, 1)}
        for conv, g, s in zip(self.modules, self.geometries, self.levels):
            if g.kind == 'conv' and s not in self.level_shapes:
                self.level_shapes[s] = output_grid(conv, self.level_shapes[s - 1])
                self.level_strides[s] = tuple(a * b for a, b in zip(self.level_strides[s - 1], g.stride))

    def __len__(self):
        return len(self.modules)

    # --------------------------------------------------------------------------------------------- layout
    def pair_slots(self):
        """Entries of the ``max_pairs`` bound (2S - 1): slot ``2s`` bounds the listed pairs (:func:`centre_offset`
        left out) of the submanifold map of level ``s``, slot ``2s - 1`` those of the strided conv into level ``s``
        (its inverse has the same pairs)."""
        return 2 * self.num_levels - 1

    @staticmethod
    def _pair_slot(kind, level):
        return 2 * level if kind == 'subm' else 2 * level - 1

    def rulebook_layout(self, max_voxels):
        """``(kind, pairs slot, input rows, output rows)`` of every conv in execution order (kind 'subm', 'conv' or
        'inverse'; slots of :meth:`pair_slots`; rows from the level bounds ``max_voxels``)."""
        layout = []
        for g, s in zip(self.geometries, self.levels):
            rows_in, rows_out = (s + d for d in _ROWS[g.kind])
            layout.append((g.kind, self._pair_slot(g.kind, s), max_voxels[rows_in], max_voxels[rows_out]))
        return layout

    def _check_pair_bounds(self, max_pairs, bound_name):
        if len(max_pairs) != self.pair_slots():
            raise ValueError(f'{bound_name} needs {self.pair_slots()} entries (submanifold map of each level and '
                             f'strided map into each deeper level), got {list(max_pairs)}')

    # ------------------------------------------------------------------------------------- exact maps
    def exact_kernel_maps(self, voxel_coors, inverse_maps=True):
        """Exact kernel maps of every conv (no bound), rows of level 0 in the order of ``voxel_coors`` (sorted by
        ``(b, z, y, x)`` takes the rulebook ops' fast paths); deeper levels are the strided convs' output voxels.

        Args:
            voxel_coors (Tensor): (V, 4) int64 ``[b, z, y, x]`` inside ``sparse_shape``, unique rows.
            inverse_maps (bool): build the inverse convs' maps; False leaves ``None`` in their places (pair lists
                take the strided conv's pairs, swapped: the deploy pre-ops).
        Returns:
            tuple: list of :class:`KernelMap` (exact) in execution order (an inverse conv's is its strided conv's,
            transposed; submanifold convs of a level share one), and the (V_s, 4) voxels of every level.
        """
        return self._tensor_kernel_maps(SparseTensor(voxel_coors.new_empty((voxel_coors.shape[0], 0)), voxel_coors,
                                                    self.sparse_shape, 1, backend='fsdlite'), inverse_maps)

    def _tensor_kernel_maps(self, x, inverse_maps=True):
        """:meth:`exact_kernel_maps` of the voxels of a :class:`~fsdlite.models.layers.sparse_tensor.SparseTensor`
        (the maps its convs build and cache, in execution order; rows of level 0 in the tensor's order)."""
        tensors, maps = {0: x}, []
        for g, s in zip(self.geometries, self.levels):
            if g.kind == 'inverse' and not inverse_maps:
                maps.append(None)
                continue
            kmap, out = tensors[s - 1 if g.kind == 'conv' else s].kernel_map(g)
            if g.kind == 'conv':
                tensors[s] = out
            maps.append(kmap)
        return maps, [tensors[s].coords for s in sorted(tensors)]

    def exact_pair_counts(self, maps):
        """(2S - 1,) int64 listed pairs (real pairs, centre offsets left out) per :meth:`pair_slots` entry of
        :meth:`exact_kernel_maps`' maps."""
        counts = torch.zeros(self.pair_slots(), dtype=torch.long)
        for kmap, g, s in zip(maps, self.geometries, self.levels):
            if g.kind != 'inverse':
                slot, centre, starts = self._pair_slot(g.kind, s), centre_offset(g), kmap.offset_starts
                listed = int(starts[-1]) - (0 if centre is None else int(starts[centre + 1] - starts[centre]))
                counts[slot] = max(int(counts[slot]), listed)
        return counts

    def pair_lists_from_exact(self, maps, max_voxels, max_pairs, strict=None, bound_name='max_pairs'):
        """:meth:`build_pair_lists` of the maps :meth:`build_rulebooks` builds at ``max_voxels``, made from
        :meth:`exact_kernel_maps` instead when every level fits its bound (the same lists, without the maps).

        Args:
            maps (list): the first result of :meth:`exact_kernel_maps` (the inverse convs' may be ``None``).
            max_voxels (Sequence[int]): level bounds (the dump row of each level); every level must fit.
            max_pairs (Sequence[int]): pair bound per :meth:`pair_slots` entry.
            strict (bool, optional): raise when a slot has more pairs than its bound (default: eager mode);
                otherwise the pairs that do not fit are dropped and counted.
            bound_name (str): name of the bound in errors and counts.
        Returns:
            tuple: list of (3, P_slot) int64 pair lists in execution order, and (2S - 1,) int64 pairs dropped per slot.
        """
        self._check_pair_bounds(max_pairs, bound_name)
        built, strided, lists = {}, {}, []
        dropped = torch.zeros(self.pair_slots(), dtype=torch.long)
        for kmap, g, (kind, slot, num_in, num_out) in zip(maps, self.geometries, self.rulebook_layout(max_voxels)):
            if kind == 'inverse':  # the strided conv's pairs with input and output swapped
                lists.append(strided[slot][[1, 0, 2]])
                continue
            if id(kmap) not in built:
                pl = pairs_from_exact(kmap, num_in, num_out, max_pairs[slot], strict=strict,
                                      bound_name=f'{bound_name}[{slot}]', skip_offset=centre_offset(g))
                built[id(kmap)] = pl.pairs
                dropped[slot] = torch.maximum(dropped[slot], pl.num_dropped)
            if kind == 'conv':
                strided[slot] = built[id(kmap)]
            lists.append(built[id(kmap)])
        return lists, dropped

    # ----------------------------------------------------------------------------------- padded maps
    def build_rulebooks(self, voxel_coors, num_voxels, max_voxels, ops=None, bound_name='max_voxels', strict=None,
                        inverse_maps=True):
        """Neighbour maps of every conv for padded input voxels (spconv's rulebooks as padded index tensors).

        Args:
            voxel_coors (Tensor): (V0, 4) int64 ``[b, z, y, x]``, rows ``< num_voxels`` unique (padding: 0).
            num_voxels (int | Tensor): valid input voxels.
            max_voxels (Sequence[int]): voxel bound of every level (entry 0 = V0; entry s bounds the output of the
                stride-2 conv of level s).
            ops: rulebook implementation (default ``fsdlite.ops``, eager; see
                :func:`~fsdlite.models.layers.rulebook_conv.build_rulebook`).
            bound_name (str): name of the level bounds in overflow errors (``'max_voxels[s]'``).
            strict (bool, optional): raise when a level needs more voxels than its bound (default: eager mode);
                False keeps the first ``max_voxels[s]`` and counts the rest (deploy pre-ops).
            inverse_maps (bool): build the maps of the inverse convs; False leaves ``None`` in their places (pair
                lists take the strided conv's pairs, swapped).
        Returns:
            tuple: list of (V_level, K) int64 neighbour maps in execution order, list of () int64 voxel counts per
            level, and list of () int64 voxels dropped per level (non-zero only when not strict).
        Raises:
            BoundExceededError: (strict) a level needs more voxels than ``max_voxels[s]``.
        """
        if len(max_voxels) != self.num_levels:
            raise ValueError(f'max_voxels needs one bound per UNet level ({self.num_levels}), got {list(max_voxels)}')
        num = num_voxels if isinstance(num_voxels, torch.Tensor) else torch.tensor(int(num_voxels))
        levels = [(voxel_coors, num.to(voxel_coors.device).reshape(()))]  # voxels and their count per level
        built, strided = {}, {}
        nbrs, dropped = [], [torch.zeros((), dtype=torch.long, device=voxel_coors.device)]
        for conv, g, s in zip(self.modules, self.geometries, self.levels):
            if g.kind == 'inverse':  # the strided conv's map, transposed (its input voxels are the outputs)
                if g.indice_key not in strided:
                    raise KeyError(f'build_rulebooks: the inverse conv with indice_key {g.indice_key!r} has no strided '
                                   'conv with that key before it')
                nbrs.append(inverse_rulebook(strided[g.indice_key], *levels[s - 1], ops=ops).nbr
                            if inverse_maps else None)
                continue
            level = s - 1 if g.kind == 'conv' else s
            key = map_key(g, self.level_strides[level])  # the SparseTensor cache's key: convs sharing it share a map
            if key not in built:
                built[key] = build_rulebook(conv, *levels[level], self.level_shapes[level], max_out=max_voxels[s],
                                            ops=ops, bound_name=f'{bound_name}[{s}]', strict=strict)
                if g.kind == 'conv':
                    levels.append((built[key].out_coors, built[key].num_valid_out))
                    dropped.append(built[key].num_dropped)
            if g.kind == 'conv':
                strided[g.indice_key] = built[key]
            nbrs.append(built[key].nbr)
        return nbrs, [lv[1] for lv in levels], dropped

    def shrink_rulebooks(self, nbrs, from_max_voxels, max_voxels):
        """The maps of :meth:`build_rulebooks` built at level bounds ``from_max_voxels``, as built at the smaller
        (or equal) ``max_voxels`` for the same voxels: rows cut to the new output bound and input rows at or beyond
        the new input bound (the old dump among them) moved to the new dump.  Equal to building at ``max_voxels``
        when every level's voxels fit it (the output voxels of a level keep their order whatever the bound).

        Args:
            nbrs (Sequence[Tensor | None]): the maps (execution order; shared maps stay shared).
            from_max_voxels, max_voxels (Sequence[int]): level bounds, ``max_voxels[s] <= from_max_voxels[s]``.
        Returns:
            list: the maps at ``max_voxels`` (``None`` where the input had ``None``).
        """
        if len(max_voxels) != len(from_max_voxels) or any(int(a) > int(b) for a, b in zip(max_voxels,
                                                                                           from_max_voxels)):
            raise ValueError(f'shrink_rulebooks: max_voxels {list(max_voxels)} must have one entry per level, each '
                             f'<= the bounds the maps were built at, {list(from_max_voxels)}')
        layout = self.rulebook_layout(max_voxels)
        if len(nbrs) != len(layout):
            raise ValueError(f'shrink_rulebooks: expected {len(layout)} neighbour maps (one per conv), got {len(nbrs)}')
        if [int(a) for a in max_voxels] == [int(b) for b in from_max_voxels]:
            return list(nbrs)
        shrunk = {}
        for nbr, (_, _, num_in, num_out) in zip(nbrs, layout):
            if nbr is not None and id(nbr) not in shrunk:
                shrunk[id(nbr)] = nbr[:num_out].clamp(max=num_in)
        return [None if nbr is None else shrunk[id(nbr)] for nbr in nbrs]

    def count_pairs(self, nbrs, max_voxels):
        """(2S - 1,) int64 listed pairs (real pairs, centre offsets left out) per :meth:`pair_slots` entry of the
        maps of :meth:`build_rulebooks`."""
        counts, seen = torch.zeros(self.pair_slots(), dtype=torch.long), set()
        for nbr, g, (_, slot, num_in, _) in zip(nbrs, self.geometries, self.rulebook_layout(max_voxels)):
            if nbr is not None and id(nbr) not in seen:  # a map left out (inverse) or shared is counted once
                seen.add(id(nbr))
                centre = centre_offset(g)
                listed = nbr if centre is None else without_offset_column(nbr, num_in, centre)
                counts[slot] = torch.maximum(counts[slot], (listed < num_in).sum().cpu())
        return counts

    def build_pair_lists(self, nbrs, max_voxels, max_pairs, strict=None, bound_name='max_pairs'):
        """Pair lists (:mod:`~fsdlite.models.layers.pair_conv`) of the maps of :meth:`build_rulebooks`.

        Args:
            nbrs (Sequence[Tensor]): the neighbour maps (execution order; shared maps are converted once; inverse
                maps may be ``None``).
            max_voxels (Sequence[int]): the level bounds the maps were built with.
            max_pairs (Sequence[int]): pair bound per :meth:`pair_slots` entry.
            strict (bool, optional): raise when a map has more pairs than its bound (default: eager mode);
                otherwise the pairs that do not fit are dropped and counted.
            bound_name (str): name of the bound in errors and counts.
        Returns:
            tuple: list of (3, P_slot) int64 pair lists in execution order, and (2S - 1,) int64 pairs dropped per
            slot.
        """
        self._check_pair_bounds(max_pairs, bound_name)
        layout = self.rulebook_layout(max_voxels)
        if len(nbrs) != len(layout):
            raise ValueError(f'build_pair_lists: expected {len(layout)} neighbour maps (one per conv), got {len(nbrs)}')
        built, strided, lists, dropped = {}, {}, [], {}
        for nbr, g, (kind, slot, num_in, num_out) in zip(nbrs, self.geometries, layout):
            if kind == 'inverse' and slot in strided:  # the strided conv's pairs with input and output swapped
                lists.append(strided[slot].index_select(0, const([1, 0, 2], device=strided[slot].device)))
                continue
            if nbr is None:
                raise ValueError(f'build_pair_lists: the map of a {kind} conv (slot {slot}) is missing; only inverse '
                                 'maps may be left out (build_rulebooks(inverse_maps=False)), after their strided conv')
            if nbr.shape[0] != num_out:
                raise ValueError(f'build_pair_lists: a map of slot {slot} has {nbr.shape[0]} rows, expected {num_out}')
            if id(nbr) not in built:
                built[id(nbr)] = pairs_from_nbr(nbr, num_in, max_pairs[slot], strict=strict,
                                                bound_name=f'{bound_name}[{slot}]', skip_offset=centre_offset(g))
            pl = built[id(nbr)]
            dropped[slot] = pl.num_dropped if slot not in dropped else torch.maximum(dropped[slot], pl.num_dropped)
            if kind == 'conv':
                strided[slot] = pl.pairs
            lists.append(pl.pairs)
        zero = torch.zeros((), dtype=torch.long, device=nbrs[0].device if len(nbrs) else None)
        return lists, torch.stack([dropped.get(i, zero).reshape(()) for i in range(self.pair_slots())])

    def tiled_kernel_maps(self, pair_lists, max_voxels):
        """The (3, P) pair lists of :meth:`build_pair_lists` / :meth:`pair_lists_from_exact` as tiled
        :class:`KernelMap` (inside an exported graph too: slices only), rows from the level bounds."""
        layout = self._check_count('tiled_kernel_maps', pair_lists, max_voxels)
        return [KernelMap.tiled(pl, num_in, num_out, identity_offset=centre_offset(g))
                for pl, g, (_, _, num_in, num_out) in zip(pair_lists, self.geometries, layout)]

    def dense_kernel_maps(self, nbrs, max_voxels):
        """The (V_out, K) neighbour maps of :meth:`build_rulebooks` (every conv's, inverse ones included) as dense
        :class:`KernelMap`, input rows from the level bounds."""
        layout = self._check_count('dense_kernel_maps', nbrs, max_voxels)
        return [KernelMap.dense(nbr, num_in) for nbr, (_, _, num_in, _) in zip(nbrs, layout)]

    def fixed_tensor(self, features, kernel_maps, batch_size):
        """A :class:`~fsdlite.models.layers.sparse_tensor.SparseTensor` of level-0 ``features`` (padded rows) whose
        cache holds ``kernel_maps`` (one padded map per conv in execution order, from :meth:`tiled_kernel_maps` /
        :meth:`dense_kernel_maps`): the network's forward then runs on the given maps. Convs that share a map key
        (an ``indice_key``) run on the first one's map, as spconv's rulebook sharing."""
        if len(kernel_maps) != len(self):
            raise ValueError(f'fixed_tensor: expected {len(self)} kernel maps (one per conv), got {len(kernel_maps)}')
        shapes, strides, cache = self.level_shapes, self.level_strides, {}
        for g, s, kmap in zip(self.geometries, self.levels, kernel_maps):
            rows_in, rows_out = (s + d for d in _ROWS[g.kind])
            cache.setdefault(map_key(g, strides[rows_in]), given_map(kmap, shapes[rows_in], shapes[rows_out],
                                                                     strides[rows_in], strides[rows_out]))
        return SparseTensor(features, None, self.sparse_shape, batch_size, backend='fsdlite', cache=cache)

    def _check_count(self, name, maps, max_voxels):
        layout = self.rulebook_layout(max_voxels)
        if len(maps) != len(layout):
            raise ValueError(f'{name}: expected {len(layout)} maps (one per conv), got {len(maps)}')
        return layout


__all__ = ['ConvPlan', 'centre_offset']
