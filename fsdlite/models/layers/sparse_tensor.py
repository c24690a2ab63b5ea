"""A sparse tensor that carries its voxels and caches the kernel maps of the convs run on it.

:class:`SparseTensor` holds (N, C) features on (N, 4) int64 voxels ``[b, z, y, x]`` of a grid, the stride of the
grid relative to the network's input, the batch size, the backend its exact kernel maps are built for, and a cache
of kernel maps shared by every tensor derived from it (a conv's output, :meth:`SparseTensor.replace_feature`).  A
conv asks the tensor for its map (:meth:`SparseTensor.kernel_map`); the map is built once per key (:func:`map_key`:
kind, kernel size, stride, padding, dilation, ``indice_key`` and the input's stride), so layers sharing a key share
one :class:`~fsdlite.ops.sparse_conv.KernelMap` object:

* submanifold -- offset pairs of the tensor's voxels (``fsdlite.ops.subm_offset_pairs``); output voxels = input;
* strided -- output voxels and pairs (``fsdlite.ops.conv_offset_pairs``), output stride = input stride * stride;
* inverse -- the transposed map of the strided conv with the same ``indice_key`` whose output voxels are this
  tensor's; the output voxels are that conv's input voxels (spconv's rule).

Exact maps run on fsdlite's fused kernels or, for a tensor whose backend is ``'spconv'``, on spconv's
(:meth:`KernelMap.on_spconv <fsdlite.ops.sparse_conv.KernelMap.on_spconv>`).

A fixed-shape run (padded maps built by the deploy pre-ops or in the graph) gives the maps instead: a tensor
without coordinates whose cache already holds every conv's map (:func:`given_map`,
:meth:`ConvPlan.fixed_tensor <fsdlite.models.layers.conv_plan.ConvPlan.fixed_tensor>`), so the network runs the
same code on either.
"""
from typing import NamedTuple

import torch

from fsdlite.ops import KernelMap, conv_offset_pairs, conv_output_shape, subm_offset_pairs, voxel_keys

from .sparse_conv import BACKENDS, resolve_backend


class _Entry(NamedTuple):
    kernel_map: KernelMap
    in_coords: torch.Tensor
    out_coords: torch.Tensor
    in_shape: tuple
    out_shape: tuple
    in_stride: tuple
    out_stride: tuple


def given_map(kernel_map, in_shape, out_shape, in_stride, out_stride):
    """A cache entry for a map built elsewhere (a fixed-shape run's padded map): no voxel coordinates."""
    return _Entry(kernel_map, None, None, tuple(in_shape), tuple(out_shape), tuple(in_stride), tuple(out_stride))


def map_key(geometry, tensor_stride):
    """Cache key of a conv's kernel map: ``(kind, kernel_size, stride, padding, dilation, indice_key, tensor_stride)``
    of a :class:`~fsdlite.models.layers.rulebook_conv.ConvGeometry` on an input of stride ``tensor_stride``."""
    g = geometry
    return (g.kind, g.kernel_size, g.stride, g.padding, g.dilation, g.indice_key, tuple(tensor_stride))


def voxel_order(coords, spatial_shape):
    """(V,) int64 permutation sorting (V, 4) ``[b, z, y, x]`` voxels by ``(b, z, y, x)`` (the rulebook ops' fast
    paths), or None when they are sorted already."""
    key = voxel_keys(coords, spatial_shape)
    return None if bool((key[1:] > key[:-1]).all()) else torch.argsort(key)


def _strided_key(indice_key, out_stride):
    return ('strided output', indice_key, tuple(out_stride))


class SparseTensor:
    """Features on voxels, with the kernel maps of the convs run on them (see the module docstring).

    Args:
        features (Tensor): (N, C) float.
        coords (Tensor): (N, 4) integer ``[b, z, y, x]`` inside ``spatial_shape``, unique rows (stored as int64);
            None for a tensor whose ``cache`` holds every map its convs need (:func:`given_map`).
        spatial_shape (Sequence[int]): grid ``(nz, ny, nx)``.
        batch_size (int): B (samples may have no voxels; None allowed without coords).
        stride (Sequence[int]): stride of the grid relative to the network's input, (z, y, x).
        backend (str): what runs exact maps, one of :data:`~fsdlite.models.layers.sparse_conv.BACKENDS`
            (``'auto'`` is decided for the device of ``features``:
            :func:`~fsdlite.models.layers.sparse_conv.resolve_backend`).
        cache (dict, optional): kernel-map cache to share (default: a new one).
    """

    def __init__(self, features, coords, spatial_shape, batch_size, stride=(1, 1, 1), backend='auto', cache=None):
        if coords is not None and (coords.dim() != 2 or coords.shape[1] != 4 or coords.is_floating_point()):
            raise ValueError(f'SparseTensor: coords must be an integer (N, 4) [b, z, y, x] tensor, got '
                             f'{coords.dtype} {tuple(coords.shape)}')
        rows = features.shape[0] if coords is None else coords.shape[0]
        if features.dim() != 2 or features.shape[0] != rows:
            raise ValueError(f'SparseTensor: features must have shape ({rows}, C) (one row per voxel of '
                             f'coords), got {tuple(features.shape)}')
        if len(spatial_shape) != 3 or len(stride) != 3:
            raise ValueError(f'SparseTensor: spatial_shape and stride need 3 entries (z, y, x), got '
                             f'{tuple(spatial_shape)} and {tuple(stride)}')
        self.features = features
        self.coords = None if coords is None else coords.long()
        self.spatial_shape = tuple(int(v) for v in spatial_shape)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.stride = tuple(int(v) for v in stride)
        self.backend = backend if backend in BACKENDS[1:] else resolve_backend(backend, features.device)
        self.cache = {} if cache is None else cache

    def replace_feature(self, features):
        """The same voxels (and cache) with other (N, C') ``features``."""
        return self._on(features, self.coords, self.spatial_shape, self.stride)

    def _on(self, features, coords, spatial_shape, stride):
        out = SparseTensor.__new__(SparseTensor)  # fields are valid by construction: skip the checks
        out.features, out.coords, out.spatial_shape, out.stride = features, coords, spatial_shape, stride
        out.batch_size, out.backend, out.cache = self.batch_size, self.backend, self.cache
        return out

    def kernel_map(self, geometry):
        """The kernel map of a conv on this tensor, built once per :func:`map_key` and cached.

        Args:
            geometry (ConvGeometry): the conv's geometry
                (:func:`~fsdlite.models.layers.rulebook_conv.conv_geometry`).
        Returns:
            tuple: the :class:`~fsdlite.ops.sparse_conv.KernelMap` and the output tensor (its voxels,
            grid and stride; features None until :meth:`replace_feature`).
        Raises:
            ValueError: a cached map of the same key was built on other voxels, or an inverse conv finds no strided
                conv with its ``indice_key`` that produced this tensor's voxels.
        """
        key = map_key(geometry, self.stride)
        entry = self.cache.get(key)
        if entry is None:
            if self.coords is None:
                raise ValueError(f'SparseTensor: no kernel map of key {key} was given, and a tensor without coords '
                                 'cannot build one')
            entry = self._build(geometry)
            self.cache[key] = entry
        elif entry.in_coords is not self.coords and not torch.equal(entry.in_coords, self.coords):
            raise ValueError(f'SparseTensor: the kernel map of key {key} was built on other voxels (a conv that '
                             'changes the voxels needs its own indice_key, as in spconv)')
        return entry.kernel_map, self._on(None, entry.out_coords, entry.out_shape, entry.out_stride)

    def _for_backend(self, kmap):
        return kmap.on_spconv() if self.backend == 'spconv' else kmap

    def _build(self, g):
        coords, shape = self.coords, self.spatial_shape
        if g.kind == 'subm':
            kmap = self._for_backend(subm_offset_pairs(coords, shape, g.kernel_size, g.dilation))
            return _Entry(kmap, coords, coords, shape, shape, self.stride, self.stride)
        if g.kind == 'conv':
            out_coords, kmap = conv_offset_pairs(coords, shape, g.kernel_size, g.stride, g.padding, g.dilation)
            out_shape = conv_output_shape(shape, g.kernel_size, g.stride, g.padding, g.dilation)
            out_stride = tuple(a * b for a, b in zip(self.stride, g.stride))
            entry = _Entry(self._for_backend(kmap), coords, out_coords, shape, out_shape, self.stride, out_stride)
            if g.indice_key is not None:
                self.cache[_strided_key(g.indice_key, out_stride)] = entry
            return entry
        strided = self.cache.get(_strided_key(g.indice_key, self.stride))
        if strided is None or not (strided.out_coords is coords or torch.equal(strided.out_coords, coords)):
            raise ValueError(f'SparseTensor: the inverse conv with indice_key {g.indice_key!r} needs the strided conv '
                             f'with that key to have produced its input voxels (stride {self.stride}); '
                             f'{"none ran" if strided is None else "that conv produced other voxels"}')
        kmap = strided.kernel_map.transposed()  # output rows ascending within an offset
        return _Entry(kmap, coords, strided.in_coords, shape, strided.in_shape, self.stride, strided.in_stride)

    def __repr__(self):
        """Rows, channels, grid, stride, batch size, backend and cached maps."""
        channels = None if self.features is None else self.features.shape[1]
        rows = (self.features if self.coords is None else self.coords).shape[0]
        return (f'SparseTensor(rows={rows}, channels={channels}, spatial_shape={self.spatial_shape}, '
                f'stride={self.stride}, batch_size={self.batch_size}, backend={self.backend!r}, '
                f'cached_maps={len(self.cache)})')


__all__ = ['SparseTensor', 'given_map', 'map_key', 'voxel_order']
