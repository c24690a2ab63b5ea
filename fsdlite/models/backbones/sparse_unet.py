"""Sparse 3D UNet (spconv's layers or fsdlite's own) whose output voxel set (and row order) equals its input."""
import torch
from torch import nn

from fsdlite.ops import (OffsetPairs, conv_offset_pairs, conv_output_shape, sparse_conv, subm_offset_pairs,
                         voxel_keys)
from fsdlite.registry import MODELS
from fsdlite.utils.constants import const

from ..layers.channels import stage_channels
from ..layers.norm_act import DEFAULT_ACT_CFG, DEFAULT_NORM_CFG
from ..layers.sparse_block import choose_conv_backend, sparse_conv_block, sparse_sequential, to_sparse_tensor
from ..layers.voxel_geometry import voxel_grid


def _sum_channel_groups(features, out_channels):
    """(V, k * out_channels) -> (V, out_channels) by summing groups of k consecutive channels.

    Written as k - 1 adds of strided column slices: ``view(V, C, k).sum(2)`` (a reduction over a last axis of 2)
    takes ~9x longer on the CPU for the same bits at k = 2.
    """
    k = features.shape[1] // out_channels
    total = features[:, 0::k]
    for j in range(1, k):
        total = total + features[:, j::k]
    return total


@MODELS.register_module()
class SparseUNet(nn.Module):
    """Encoder-decoder of sparse convolutions (FSD's SimpleSparseUNet layout).

    * ``conv_input``: SubMConv3d ``in_channels -> base_channels``.
    * encoder stage ``s`` has one conv per entry of ``encoder_channels[s]``; stage 0 keeps the input
      resolution (SubMConv3d only), each later stage starts with a stride-2 SparseConv3d followed by
      SubMConv3d layers.
    * decoder stage ``j`` (deepest first; ``s = S - 1 - j``) has ``decoder_channels[j] =
      (lateral, merge, up)``: a SubMConv3d lateral block on the encoder output of stage ``s``, a
      SubMConv3d merge of ``[incoming, lateral]`` plus a parameter-free shortcut (sum of channel groups,
      so ``lateral + incoming`` must be a multiple of ``merge``), then an inverse conv back to stage
      ``s - 1``'s voxels (``up`` channels) or, for ``s = 0``, a SubMConv3d output layer.

    Because every upsampling inverts a recorded downsampling and the last layer is submanifold, the
    output features are row-aligned with the input voxels.  Channels and depths are flat per-stage
    tuples, so a slimmed network is just a different config.

    Args:
        in_channels (int): C_in of the voxel features.
        voxel_size, point_range: voxel grid; the sparse shape is ``fsdlite.ops.grid_shape`` of them.
        base_channels (int): width of ``conv_input``.
        encoder_channels (Sequence[Sequence[int]]): per-stage conv widths, e.g. ``((16,), (32, 32))``.
        decoder_channels (Sequence[Sequence[int]]): per decoder stage ``(lateral, merge, up)``; one per
            encoder stage.
        norm_cfg, act_cfg (dict | None): norm / activation after every conv.
        conv_backend (str): how the eager forward runs the convolutions: ``'spconv'`` (spconv's rulebooks and
            kernels, the conv layers called as modules), ``'fsdlite'`` (this library's rulebook ops and fused
            ``fsdlite.ops.sparse_conv`` kernel and its weight-gradient kernel: no per-offset Python loop,
            faster on the CPU, most for narrow layers) or ``'auto'`` (``'fsdlite'`` for CPU tensors, in
            training and inference; for CUDA tensors ``'spconv'`` when spconv imports and runs there, else
            ``'fsdlite'``'s CUDA kernels). Same weights, same results up to float rounding; all train. Without spconv (or with
            ``FSDLITE_NO_SPCONV=1``) the layers are fsdlite's own and only ``'fsdlite'`` runs them.
    """
    CONV_BACKENDS = ('auto', 'spconv', 'fsdlite')

    def __init__(self, in_channels, voxel_size, point_range, base_channels=16,
                 encoder_channels=((16,), (32, 32), (64, 64)),
                 decoder_channels=((64, 64, 32), (32, 32, 16), (16, 16, 16)),
                 norm_cfg=DEFAULT_NORM_CFG, act_cfg=DEFAULT_ACT_CFG, conv_backend='auto'):
        super().__init__()
        if conv_backend not in self.CONV_BACKENDS:
            raise ValueError(f'conv_backend must be one of {self.CONV_BACKENDS}, got {conv_backend!r}')
        self.conv_backend = conv_backend
        _, _, self.sparse_shape = voxel_grid(voxel_size, point_range)
        self.encoder_channels = stage_channels('encoder_channels', encoder_channels)
        self.decoder_channels = stage_channels('decoder_channels', decoder_channels, length=3)
        if len(self.decoder_channels) != len(self.encoder_channels):
            raise ValueError(f'decoder_channels needs one (lateral, merge, up) entry per encoder stage '
                             f'({len(self.encoder_channels)}), got {len(self.decoder_channels)}: {decoder_channels!r}')
        self.in_channels = int(in_channels)
        blk = dict(norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.conv_input = sparse_conv_block('SubMConv3d', self.in_channels, base_channels, indice_key='subm1', **blk)
        self.encoder = nn.ModuleList()
        prev = base_channels
        for s, widths in enumerate(self.encoder_channels):
            layers = []
            for k, c in enumerate(widths):
                if s > 0 and k == 0:
                    layers.append(sparse_conv_block('SparseConv3d', prev, c, stride=2, padding=1,
                                                    indice_key=f'spconv{s + 1}', **blk))
                else:
                    layers.append(sparse_conv_block('SubMConv3d', prev, c, indice_key=f'subm{s + 1}', **blk))
                prev = c
            self.encoder.append(sparse_sequential(*layers))
        self.lateral, self.merge, self.upsample = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        num_stages = len(self.encoder_channels)
        for j, (lat, mer, up) in enumerate(self.decoder_channels):
            s = num_stages - 1 - j
            skip = self.encoder_channels[s][-1]
            if (lat + prev) % mer:
                raise ValueError(f'decoder_channels[{j}]={self.decoder_channels[j]!r}: lateral ({lat}) + incoming '
                                 f'({prev}) channels must be a multiple of merge ({mer}) for the shortcut')
            self.lateral.append(sparse_conv_block('SubMConv3d', skip, lat, indice_key=f'subm{s + 1}', **blk))
            self.merge.append(sparse_conv_block('SubMConv3d', lat + prev, mer, indice_key=f'subm{s + 1}', **blk))
            if s > 0:
                self.upsample.append(sparse_conv_block('SparseInverseConv3d', mer, up, indice_key=f'spconv{s + 1}',
                                                       **blk))
            else:
                self.upsample.append(sparse_conv_block('SubMConv3d', mer, up, indice_key='subm1', **blk))
            prev = up
        self.out_channels = prev

    def forward(self, voxel_feats, voxel_coors, batch_size):
        """Run the UNet.

        Args:
            voxel_feats (Tensor): (V, in_channels) float features (V >= 1).
            voxel_coors (Tensor): (V, 4) int ``[b, z, y, x]`` inside ``sparse_shape``, unique rows.
            batch_size (int): B.
        Returns:
            Tensor: (V, out_channels) features, row ``i`` belonging to ``voxel_coors[i]``.
        """
        if voxel_feats.dim() != 2 or voxel_feats.shape[1] != self.in_channels:
            raise ValueError(f'voxel_feats must have shape (V, {self.in_channels}), got {tuple(voxel_feats.shape)}')
        if voxel_feats.shape[0] == 0:
            raise ValueError('SparseUNet needs at least one voxel (V >= 1); callers must handle empty batches')
        if self.resolved_conv_backend(voxel_feats) == 'fsdlite':
            return self.forward_fused(voxel_feats, voxel_coors)
        x = self.conv_input(to_sparse_tensor(voxel_feats, voxel_coors, self.sparse_shape, batch_size))
        skips = []
        for stage in self.encoder:
            x = stage(x)
            skips.append(x)
        for lateral, merge, upsample, skip in zip(self.lateral, self.merge, self.upsample, reversed(skips)):
            lat = lateral(skip)
            cat = lat.replace_feature(torch.cat([x.features, lat.features], 1))
            merged = merge(cat)
            shortcut = _sum_channel_groups(cat.features, merged.features.shape[1])
            x = upsample(merged.replace_feature(merged.features + shortcut))
        return x.features

    def resolved_conv_backend(self, voxel_feats):
        """``'spconv'`` or ``'fsdlite'``: :attr:`conv_backend` with ``'auto'`` decided for the device of
        ``voxel_feats`` (:func:`~fsdlite.models.layers.sparse_block.choose_conv_backend`)."""
        return choose_conv_backend(self.conv_backend, self.conv_input, voxel_feats.device)

    # ----------------------------------------------------------------------------- fixed-shape (static) path
    def _blocks(self):
        """``(block, level)`` of every conv block in execution order (the order of the neighbour maps)."""
        yield self.conv_input, 0
        for s, stage in enumerate(self.encoder):
            for block in stage:
                yield block, s
        num_stages = len(self.encoder)
        for j, (lateral, merge, upsample) in enumerate(zip(self.lateral, self.merge, self.upsample)):
            s = num_stages - 1 - j
            yield lateral, s
            yield merge, s
            yield upsample, s

    def build_rulebooks(self, voxel_coors, num_voxels, max_voxels, ops=None, bound_name='max_voxels', strict=None,
                        inverse_maps=True):
        """Neighbour maps of every conv for padded input voxels (spconv's rulebooks as padded index tensors).

        Args:
            voxel_coors (Tensor): (V0, 4) int64 ``[b, z, y, x]``, rows ``< num_voxels`` unique (padding: 0).
            num_voxels (int | Tensor): valid input voxels.
            max_voxels (Sequence[int]): voxel bound of every level (entry 0 = V0; entry s bounds the
                output of the stride-2 conv of encoder stage s).
            ops: rulebook implementation (default ``fsdlite.ops``, eager; see
                :func:`~fsdlite.models.layers.rulebook_conv.build_rulebook`).
            bound_name (str): name of the level bounds in overflow errors (``'max_voxels[s]'``).
            strict (bool, optional): raise when a level needs more voxels than its bound (default: eager mode);
                False keeps the first ``max_voxels[s]`` and counts the rest (deploy pre-ops).
            inverse_maps (bool): build the maps of the inverse convs; False leaves ``None`` in their places (pair
                lists take the strided conv's pairs, swapped: :meth:`build_pair_lists`, :meth:`count_pairs`).
        Returns:
            tuple: list of (V_level, K) int64 neighbour maps in execution order (the input of
            :meth:`forward_rulebook`), list of () int64 voxel counts per level, and list of () int64 voxels
            dropped per level (non-zero only when not strict).
        Raises:
            BoundExceededError: (strict) a level needs more voxels than ``max_voxels[s]``.
        """
        from ..layers.rulebook_conv import build_rulebook, conv_geometry
        if len(max_voxels) != len(self.encoder):
            raise ValueError(f'max_voxels needs one bound per UNet level ({len(self.encoder)}), got {list(max_voxels)}')
        num = num_voxels if isinstance(num_voxels, torch.Tensor) else torch.tensor(int(num_voxels))
        levels = [(voxel_coors, num.to(voxel_coors.device).reshape(()), tuple(self.sparse_shape))]
        cache, nbrs, dropped = {}, [], [torch.zeros((), dtype=torch.long, device=voxel_coors.device)]
        for block, s in self._blocks():
            conv = block[0]
            kind = conv_geometry(conv).kind
            level = s - 1 if kind == 'conv' else s
            if kind == 'inverse' and not inverse_maps:
                nbrs.append(None)
                continue
            rb = build_rulebook(conv, *levels[level], cache=cache, max_out=max_voxels[s], ops=ops,
                                bound_name=f'{bound_name}[{s}]', strict=strict)
            if kind == 'conv':
                levels.append((rb.out_coors, rb.num_valid_out, rb.out_spatial_shape))
                dropped.append(rb.num_dropped)
            nbrs.append(rb.nbr)
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

    def pair_slots(self):
        """Entries of the ``max_pairs`` bound (2S - 1 for S levels): slot ``2s`` bounds the pairs of the
        submanifold rulebook of level ``s``, slot ``2s - 1`` those of the strided conv into level ``s`` (its
        inverse conv has the same pairs, transposed)."""
        return 2 * len(self.encoder) - 1

    def rulebook_layout(self, max_voxels):
        """``(kind, pairs slot, input rows, output rows)`` of every conv in execution order (kind 'subm', 'conv' or
        'inverse'; slots of :meth:`pair_slots`)."""
        from ..layers.rulebook_conv import conv_geometry
        layout = []
        for block, s in self._blocks():
            kind = conv_geometry(block[0]).kind
            rows = {'subm': (s, s), 'conv': (s - 1, s), 'inverse': (s, s - 1)}[kind]
            layout.append((kind, self._pair_slot(kind, s), max_voxels[rows[0]], max_voxels[rows[1]]))
        return layout

    @staticmethod
    def _pair_slot(kind, level):
        """:meth:`pair_slots` entry of a conv of ``kind`` in a block of UNet level ``level`` (a strided conv and its
        inverse share the slot of the level the strided conv makes)."""
        return 2 * level if kind == 'subm' else 2 * level - 1

    def _check_pair_bounds(self, max_pairs, bound_name):
        if len(max_pairs) != self.pair_slots():
            raise ValueError(f'{bound_name} needs {self.pair_slots()} entries (submanifold map of each level and '
                             f'strided map into each deeper level), got {list(max_pairs)}')

    def count_pairs(self, nbrs, max_voxels):
        """(2S - 1,) int64 real pairs per :meth:`pair_slots` entry of the maps of :meth:`build_rulebooks`."""
        counts, seen = torch.zeros(self.pair_slots(), dtype=torch.long), set()
        for nbr, (_, slot, num_in, _) in zip(nbrs, self.rulebook_layout(max_voxels)):
            if nbr is not None and id(nbr) not in seen:  # a map left out (inverse) or shared is counted once
                seen.add(id(nbr))
                counts[slot] = torch.maximum(counts[slot], (nbr < num_in).sum().cpu())
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
        from ..layers.pair_conv import pairs_from_nbr
        self._check_pair_bounds(max_pairs, bound_name)
        layout = self.rulebook_layout(max_voxels)
        if len(nbrs) != len(layout):
            raise ValueError(f'build_pair_lists: expected {len(layout)} neighbour maps (one per conv), got {len(nbrs)}')

        built, strided, lists, dropped = {}, {}, [], {}
        for nbr, (kind, slot, num_in, num_out) in zip(nbrs, layout):
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
                                                bound_name=f'{bound_name}[{slot}]')
            pl = built[id(nbr)]
            dropped[slot] = pl.dropped if slot not in dropped else torch.maximum(dropped[slot], pl.dropped)
            if kind == 'conv':
                strided[slot] = pl.pairs
            lists.append(pl.pairs)
        zero = torch.zeros((), dtype=torch.long, device=nbrs[0].device if len(nbrs) else None)
        return lists, torch.stack([dropped.get(i, zero).reshape(()) for i in range(self.pair_slots())])

    def forward_rulebook(self, voxel_feats, nbrs, max_voxels=None):
        """Fixed-shape forward: every conv as a gather-GEMM over its neighbour map, spconv's weights unchanged.

        Args:
            voxel_feats (Tensor): (V0, in_channels) padded voxel features.
            nbrs (Sequence[Tensor]): the maps of :meth:`build_rulebooks`, or (with ``max_voxels``) the pair
                lists of :meth:`build_pair_lists`.
            max_voxels (Sequence[int], optional): the level bounds; given, ``nbrs`` are pair lists
                (gather-GEMM-scatter over the real pairs only).
        Returns:
            Tensor: (V0, out_channels), row-aligned with the input (padding rows hold unspecified values).
        """
        from ..layers.pair_conv import pair_conv_forward
        from ..layers.rulebook_conv import rulebook_conv_forward
        expected = sum(1 for _ in self._blocks())
        if len(nbrs) != expected:
            raise ValueError(f'forward_rulebook: expected {expected} neighbour maps (one per conv), got {len(nbrs)}')
        maps = iter(nbrs)
        rows = iter([None] * expected if max_voxels is None else
                    [out for *_, out in self.rulebook_layout(max_voxels)])

        def conv(layers, x):
            num_out = next(rows)
            if num_out is None:
                return rulebook_conv_forward(layers[0], x, next(maps)), 1
            return pair_conv_forward(layers[0], x, next(maps), num_out), 1

        return self._run_convs(voxel_feats, conv)

    # ------------------------------------------------------------------ eager path on fsdlite's own kernels
    def offset_pairs(self, voxel_coors):
        """Offset-grouped pairs (``fsdlite.ops.sparse_conv``'s input) of every conv, built straight from the voxels
        sorted by ``(b, z, y, x)`` (the rulebook ops' fast paths): one submanifold rulebook per level and kernel, one
        per strided conv (its exact output voxels make the next level; its input rows ascend within an offset, so
        swapped they are the pairs of its inverse conv).

        Args:
            voxel_coors (Tensor): (V, 4) int ``[b, z, y, x]`` inside ``sparse_shape``, unique rows.
        Returns:
            tuple: list of ``(OffsetPairs, output rows, one_by_one)`` of every conv in execution order (rows of
            level 0 in sorted order), and the sorting permutation of ``voxel_coors`` (None when already sorted).
        """

        coors = voxel_coors.long()
        key = voxel_keys(coors, self.sparse_shape)
        order = None if bool((key[1:] > key[:-1]).all()) else torch.argsort(key)
        convs, levels = self.exact_rulebooks(coors if order is None else coors.index_select(0, order))
        plan = []
        for kind, pairs, strided, level_out, one_by_one in convs:
            if kind == 'inverse':
                pairs = OffsetPairs(convs[strided][1].pairs.flip(0), convs[strided][1].offset_starts)
            plan.append((pairs, levels[level_out].shape[0], one_by_one))
        return plan, order

    def exact_rulebooks(self, voxel_coors):
        """Offset-grouped pairs of every conv but the inverse ones, exact (no bound), rows of level 0 in the order of
        ``voxel_coors`` (sorted by ``(b, z, y, x)`` takes the ops' fast paths); deeper levels are the strided
        convs' output voxels, in that order.

        Args:
            voxel_coors (Tensor): (V, 4) int64 ``[b, z, y, x]`` inside ``sparse_shape``, unique rows.
        Returns:
            tuple: list of ``(kind, OffsetPairs | None, strided, output level, one_by_one)`` of every conv in
            execution order (kind 'subm', 'conv' or 'inverse'; an inverse conv has no pairs of its own: ``strided``
            is the position of its strided conv, whose pairs it takes swapped), and the (V_s, 4) voxels of every level.
        """

        from ..layers.rulebook_conv import conv_geometry
        levels = [(voxel_coors, tuple(self.sparse_shape))]
        subm, strided, convs = {}, {}, []
        for block, s in self._blocks():
            g = conv_geometry(block[0])
            if g.kind == 'subm':
                shared = (s, g.kernel_size, g.dilation)
                if shared not in subm:
                    subm[shared] = subm_offset_pairs(*levels[s], g.kernel_size, g.dilation)
                convs.append(('subm', subm[shared], None, s, g.one_by_one))
            elif g.kind == 'conv':
                coors, shape = levels[s - 1]
                out_coors, pairs = conv_offset_pairs(coors, shape, g.kernel_size, g.stride, g.padding, g.dilation)
                levels.append((out_coors, conv_output_shape(shape, g.kernel_size, g.stride, g.padding, g.dilation)))
                strided[s] = len(convs)
                convs.append(('conv', pairs, None, s, g.one_by_one))
            else:
                convs.append(('inverse', None, strided[s], s - 1, g.one_by_one))
        return convs, [coors for coors, _ in levels]

    def exact_pair_counts(self, convs):
        """(2S - 1,) int64 real pairs per :meth:`pair_slots` entry of :meth:`exact_rulebooks`' convs."""
        counts = torch.zeros(self.pair_slots(), dtype=torch.long)
        for (kind, pairs, *_), (_, s) in zip(convs, self._blocks()):
            if kind != 'inverse':
                slot = self._pair_slot(kind, s)
                counts[slot] = max(int(counts[slot]), int(pairs.offset_starts[-1]))
        return counts

    def pair_lists_from_exact(self, convs, max_voxels, max_pairs, strict=None, bound_name='max_pairs'):
        """:meth:`build_pair_lists` of the maps :meth:`build_rulebooks` builds at ``max_voxels``, made from
        :meth:`exact_rulebooks` instead when every level fits its bound (the same lists, without the maps).

        Args:
            convs (list): the first result of :meth:`exact_rulebooks`.
            max_voxels (Sequence[int]): level bounds (the dump row of each level); every level must fit.
            max_pairs (Sequence[int]): pair bound per :meth:`pair_slots` entry.
            strict (bool, optional): raise when a slot has more pairs than its bound (default: eager mode);
                otherwise the pairs that do not fit are dropped and counted.
            bound_name (str): name of the bound in errors and counts.
        Returns:
            tuple: list of (3, P_slot) int64 pair lists in execution order, and (2S - 1,) int64 pairs dropped per slot.
        """
        from ..layers.pair_conv import pairs_from_offset_pairs
        self._check_pair_bounds(max_pairs, bound_name)
        layout = self.rulebook_layout(max_voxels)
        built, lists = {}, []
        dropped = torch.zeros(self.pair_slots(), dtype=torch.long)
        for (kind, pairs, strided, _, _), (_, slot, num_in, num_out) in zip(convs, layout):
            if kind == 'inverse':  # the strided conv's pairs with input and output swapped
                lists.append(lists[strided][[1, 0, 2]])
                continue
            if id(pairs) not in built:
                pl = pairs_from_offset_pairs(pairs, num_in, num_out, max_pairs[slot], strict=strict,
                                             bound_name=f'{bound_name}[{slot}]')
                built[id(pairs)] = pl.pairs
                dropped[slot] = torch.maximum(dropped[slot], pl.dropped)
            lists.append(built[id(pairs)])
        return lists, dropped

    def forward_fused(self, voxel_feats, voxel_coors):
        """Eager forward on :meth:`offset_pairs` and ``fsdlite.ops.sparse_conv`` (``conv_backend='fsdlite'``).

        Args:
            voxel_feats (Tensor): (V, in_channels) float32/float64 features.
            voxel_coors (Tensor): (V, 4) int ``[b, z, y, x]`` inside ``sparse_shape``, unique rows.
        Returns:
            Tensor: (V, out_channels), row-aligned with the input.
        """

        from ..layers.bn_fold import run_conv_norm_act
        from ..layers.rulebook_conv import kernel_matrices
        plan, order = self.offset_pairs(voxel_coors)
        plan = iter(plan)

        def conv(layers, x):  # an eval-mode BatchNorm after the conv is folded into it when no gradient is needed
            pairs, num_out, one_by_one = next(plan)
            return run_conv_norm_act(layers, x, lambda x, w, b: sparse_conv(x, w, *pairs, num_out, bias=b),
                                     lambda w: kernel_matrices(w, one_by_one), one_by_one)

        if order is None:
            return self._run_convs(voxel_feats, conv)
        out = self._run_convs(voxel_feats.index_select(0, order), conv)  # rows back in the caller's order
        return torch.empty_like(out).index_copy_(0, order, out)

    def _run_convs(self, voxel_feats, conv):
        """The UNet on plain (rows, C) tensors; ``conv(layers, x)`` runs the first ``n >= 1`` layers of every block
        (``layers``: the block's modules, the conv first) and returns ``(output, n)``."""
        def run(block, x):
            layers = list(block.children())  # (indexing a spconv SparseSequential walks it)
            x, done = conv(layers, x)
            for module in layers[done:]:
                x = module(x)
            return x

        x = run(self.conv_input, voxel_feats)
        skips = []
        for stage in self.encoder:
            for block in stage:
                x = run(block, x)
            skips.append(x)
        for lateral, merge, upsample, skip in zip(self.lateral, self.merge, self.upsample, reversed(skips)):
            lat = run(lateral, skip)
            cat = torch.cat([x, lat], 1)
            merged = run(merge, cat)
            x = run(upsample, merged + _sum_channel_groups(cat, merged.shape[1]))
        return x


__all__ = ['SparseUNet']
