"""Shared pieces of the kernel-point layers: the base class (kernel points, influence settings, the
``impl`` kernel choice) and neighbourhood helpers (max-pool, nearest upsampling, centre features).

Point clouds are flat: ``q_pts`` (M, 3) queries, ``s_pts`` (N, 3) supports, ``neighbors`` (M, H)
int64 indices into the supports padded with the shadow index N (zero feature, never influential).
"""
import torch
from torch import nn

from fsdlite import ops as fsdlite_ops
from fsdlite.ops.kp_aggregate.reference import kp_aggregate_reference
from fsdlite.ops.kpconv.reference import kpconv_reference

from ...structures.bounds import is_exporting
from ...structures.padded import with_dump_row
from ..layers.execution import execution_mode
from . import export_forms
from .export_forms import gather_rows, kp_aggregate_export, kpconv_export
from .kernel_points import make_kernel_points

IMPLS = ('fused', 'naive')


def ops():
    """``fsdlite.ops`` (the kernel-point families build on the first call of one of their ops)."""
    return fsdlite_ops


def references(impl='naive'):
    """The pure-torch forms of (kpconv, kp_aggregate): the references (``impl='naive'``) or the ONNX-friendly
    formulation of :mod:`.export_forms` (``'export'``, what :meth:`KernelPointLayer.forms` gives in the fixed
    execution mode)."""
    if impl == 'export':
        return kpconv_export, kp_aggregate_export
    return kpconv_reference, kp_aggregate_reference


def neighbor_max_pool(x, neighbors, chunk=None):
    """Max over each neighbourhood, shadow slots counting as zero rows (KPConv's max-pool).

    Args:
        x (Tensor): (N, C) features.
        neighbors (Tensor): (M, H) indices in [0, N].
        chunk (int, optional): queries per step (bounds the (chunk, H, C) transient); default 65536, and while
            exporting ``export_forms.CHUNK_ELEMENTS / (H C)`` (cache-sized steps for ONNX Runtime).
    Returns:
        Tensor: (M, C); 0 for queries whose slots are all shadows (or H = 0).
    """
    m, h = neighbors.shape
    if h == 0 or m == 0:
        return x.new_zeros((m, x.shape[1]))
    if chunk is None:
        chunk = max(1, export_forms.CHUNK_ELEMENTS // (h * x.shape[1])) if is_exporting() else 65536
    table = with_dump_row(x)
    return torch.cat([gather_rows(table, neighbors[i:i + chunk], True).amax(1) for i in range(0, m, chunk)], 0)


def nearest_upsample(x, upsamples):
    """Copy features from the closest coarse point (column 0 of ``upsamples`` (M, H), shadow -> 0)."""
    return gather_rows(x, upsamples[:, :1])[:, 0]


def center_features(q_pts, s_pts, neighbors, x):
    """Feature of each query point: its own row when queries are the supports, else the
    neighbourhood max-pool (strided layers)."""
    if q_pts is s_pts:
        return x
    return neighbor_max_pool(x, neighbors)


def resolve_groups(channels, groups=None, channels_per_group=None, what='layer'):
    """Number W of generated weights per kernel point: ``groups`` or ``channels / channels_per_group``.

    Channel c is driven by weight ``c // (channels / W)``.
    """
    if (groups is None) == (channels_per_group is None):
        raise ValueError(f'{what}: give exactly one of groups / channels_per_group, got groups={groups!r}, '
                         f'channels_per_group={channels_per_group!r}')
    w = groups if groups is not None else channels // max(int(channels_per_group), 1)
    if not isinstance(w, int) or w < 1 or channels % w or (
            channels_per_group is not None and channels % int(channels_per_group)):
        raise ValueError(f'{what}: {channels} channels cannot be split into groups={groups!r} / '
                         f'channels_per_group={channels_per_group!r} (must divide the channels)')
    return w


class KernelPointLayer(nn.Module):
    """Base of KPConv / KPConvD / KPConvX / KPInv: kernel points and influence settings.

    Args:
        kernel_size (int): K kernel points.
        radius (float): kernel radius (the kernel points' mean radius is ``ratio * radius``).
        sigma (float, optional): influence extent; default ``radius`` (nearest mode convention).
        influence (str): 'constant', 'linear' or 'gaussian'.
        aggregation (str): 'sum' or 'nearest'.
        shells (list[int], optional): shell layout of the kernel points (e.g. [1, 14, 28]).
        fixed (str): 'center' pins kernel point 0 at the origin.
        rotation (str): random rotation of the kernel points: 'z', 'all' or 'none'.
        ratio (float): mean radius ratio of the repulsion dispositions.
        impl (str): 'fused' (fsdlite.ops) or 'naive' (einsum reference, autograd through it).  In the fixed
            execution mode (:mod:`~fsdlite.models.layers.execution`, what deploy exports in) the layer runs the
            same math in ONNX-friendly form (:mod:`.export_forms`) whatever ``impl`` says.
    The kernel points are a persistent buffer (saved in the state dict, not trained).
    """

    def __init__(self, kernel_size=15, radius=1.0, sigma=None, influence='linear', aggregation='sum', shells=None,
                 fixed='center', rotation='z', ratio=0.66, impl='fused'):
        super().__init__()
        if impl not in IMPLS:
            raise ValueError(f'{type(self).__name__}: impl must be one of {list(IMPLS)}, got {impl!r}')
        if influence not in ('constant', 'linear', 'gaussian'):
            raise ValueError(f"{type(self).__name__}: influence must be 'constant', 'linear' or 'gaussian', "
                             f'got {influence!r}')
        if aggregation not in ('sum', 'nearest'):
            raise ValueError(f"{type(self).__name__}: aggregation must be 'sum' or 'nearest', got {aggregation!r}")
        self.kernel_size = kernel_size
        self.radius = float(radius)
        self.sigma = float(sigma) if sigma is not None else float(radius)
        if not self.sigma > 0:
            raise ValueError(f'{type(self).__name__}: sigma must be > 0, got {sigma!r}')
        self.influence = influence
        self.aggregation = aggregation
        self.impl = impl
        self.register_buffer('kernel_points', make_kernel_points(kernel_size, radius, 3, fixed, shells, ratio,
                                                                 rotation))

    def forms(self):
        """What runs the layer's op now: ``'fused'``, ``'naive'`` or, in the fixed execution mode, ``'export'``."""
        return 'export' if execution_mode() == 'fixed' else self.impl

    def kernel(self, like):
        """Kernel points in the dtype/device of ``like``."""
        return self.kernel_points.to(like)

    def geometry(self):
        """Keyword arguments of the kernel-point ops for this layer."""
        return dict(sigma=self.sigma, influence=self.influence, aggregation=self.aggregation)

    def extra_repr(self):
        """Kernel size, radius, sigma, influence, aggregation and impl."""
        return (f'K={self.kernel_size}, radius={self.radius:g}, sigma={self.sigma:g}, influence={self.influence}, '
                f'aggregation={self.aggregation}, impl={self.impl}')
