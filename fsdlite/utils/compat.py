"""The one place for shims around third-party behaviour (mmengine, spconv, torch threads).

Every shim is idempotent and tested in ``tests/utils/test_compat.py``.  The mmengine
fix is applied when :mod:`fsdlite.registry` is imported; the spconv shims by
:func:`import_spconv`, which is how every fsdlite module imports spconv (spconv's own
import takes ~10 s on CPU, so it is never imported eagerly).

* **mmengine checkpoints under torch >= 2.6**: ``torch.load`` defaults to
  ``weights_only=True`` and refuses mmengine's pickled message hub, which breaks
  ``--resume`` and ``load_from``.  We re-register the local-file scheme of
  :class:`mmengine.runner.CheckpointLoader` with a loader that passes
  ``weights_only=False`` (checkpoints are the user's own files) and turns an
  unreadable file into a clear error naming the path.
* **spconv on CPU** (the ``spconv-cu120`` wheel):
  - convolutions must use ``ConvAlgo.Native`` on CPU tensors; we pick it at
    construction when no CUDA device exists and switch to it per call for CPU inputs;
  - backward calls ``torch.cuda.current_stream()`` through
    ``spconv.pytorch.ops.get_current_stream``; on CPU it returns stream 0 instead;
  - spconv reads ``indices`` as a contiguous (V, 4) int32 buffer without checking:
    column-major indices (``torch.nonzero`` returns them so, and ``.int()`` keeps the
    strides) give silently wrong strided convolutions.  The guard makes features and
    indices contiguous and int32 before every convolution;
  - strided (non-submanifold) CPU convolutions were reported nondeterministically
    wrong with more than one torch thread; the guard runs their forward and backward
    with a single intra-op thread.
* **ONNX export time** (onnxscript 0.7): the optimizer that ``torch.onnx.export(optimize=True)``
  runs tries its one multi-output rewrite rule (``SlicesSplit``: two Slices of one tensor -> a
  Split) at every node, and each try indexes the whole graph by op type, so the export time grows
  with the square of the node count (minutes for a detector graph of ~7k nodes).
  :func:`onnx_export_rules` leaves that rule out while an export runs.
"""
import contextlib
import functools
import os
import os.path as osp
import threading
import warnings

import torch

_APPLIED = set()
_LOCK = threading.Lock()


def _once(fn):
    @functools.wraps(fn)
    def wrapper():
        with _LOCK:
            if fn.__name__ in _APPLIED:
                return False
            fn()
            _APPLIED.add(fn.__name__)
            return True

    return wrapper


@contextlib.contextmanager
def single_thread():
    """Run the enclosed block with one intra-op torch thread, restoring the count after."""
    previous = torch.get_num_threads()
    if previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# ----------------------------------------------------------------------------- mmengine
class CheckpointLoadError(RuntimeError):
    """A checkpoint file exists but cannot be read as a torch checkpoint."""


def load_from_local_file(filename, map_location=None):
    """Read a local checkpoint written by mmengine/torch.save (trusted user file).

    Args:
        filename (str): path of the checkpoint.
        map_location: forwarded to :func:`torch.load`.
    Returns:
        dict: the checkpoint.
    Raises:
        FileNotFoundError: the path does not exist.
        CheckpointLoadError: the file is truncated, corrupt or not a checkpoint.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'checkpoint {filename!r} does not exist')
    try:
        return torch.load(filename, map_location=map_location, weights_only=False)
    except Exception as exc:  # pickle/zip errors come in many types
        raise CheckpointLoadError(
            f'checkpoint {filename!r} could not be read ({type(exc).__name__}: {exc}); '
            'expected a file written by torch.save / mmengine (is it truncated or corrupt?)') from exc


@_once
def patch_mmengine_checkpoint_loading():
    """Make mmengine's local checkpoint loading work with torch >= 2.6 (weights_only default)."""
    from mmengine.runner.checkpoint import CheckpointLoader

    # The runner logs ``loader.__name__[10:]`` as the scheme: keep the ``load_from_`` prefix.
    CheckpointLoader.register_scheme(prefixes='', loader=load_from_local_file, force=True)


# ----------------------------------------------------------------------------- spconv
#: Set to 1 to run as if spconv were not installed (fsdlite's own sparse-conv modules and kernels everywhere);
#: what a machine without spconv (a CUDA image without a matching spconv wheel) does, testable anywhere.
NO_SPCONV_ENV = 'FSDLITE_NO_SPCONV'
_IMPORT_LOCK = threading.Lock()  # (not _LOCK: the patches run under that one and import spconv)
_SPCONV_IMPORT = {}  # 'ok' -> bool, 'error' -> the import error (spconv's import is tried once per process)


def spconv_disabled():
    """True when ``FSDLITE_NO_SPCONV=1`` asks fsdlite to ignore an installed spconv (read on every call)."""
    return os.environ.get(NO_SPCONV_ENV, '0') not in ('', '0')


def _spconv_imports():
    """True when spconv 2.x imports (tried once per process, whatever ``FSDLITE_NO_SPCONV`` says)."""
    with _IMPORT_LOCK:
        if 'ok' not in _SPCONV_IMPORT:
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings('ignore', category=FutureWarning)
                    warnings.filterwarnings('ignore', category=DeprecationWarning)
                    import spconv.pytorch  # noqa: F401
                _SPCONV_IMPORT['ok'] = True
            except Exception as exc:  # not installed, or built for another torch / CUDA
                _SPCONV_IMPORT.update(ok=False, error=f'{type(exc).__name__}: {exc}')
    return _SPCONV_IMPORT['ok']


def spconv_available():
    """True when spconv 2.x imports and ``FSDLITE_NO_SPCONV`` is not set (a failed import is not retried)."""
    return not spconv_disabled() and _spconv_imports()


_SPCONV_RUNS = {}  # device type -> (runs, reason): one probe per process and device type
_PROBE_LOCK = threading.Lock()  # taken before the others (the probe imports spconv and applies its patches)


def spconv_runs_on(device):
    """True when spconv imports and a tiny submanifold conv runs on ``device`` (probed once per device type: an
    spconv wheel built for another CUDA can import and still fail at its first kernel). A failed probe warns once.

    Args:
        device (torch.device | str): where the network runs.
    """
    device = torch.device(device)
    if not spconv_available():
        return False
    with _PROBE_LOCK:
        if device.type not in _SPCONV_RUNS:
            _SPCONV_RUNS[device.type] = _probe_spconv(device)
            if not _SPCONV_RUNS[device.type][0]:
                warnings.warn(f'spconv imports but does not run on {device.type}: {_SPCONV_RUNS[device.type][1]}; '
                              "conv_backend='auto' runs fsdlite's own sparse-conv kernels there", RuntimeWarning)
    return _SPCONV_RUNS[device.type][0]


@torch.compiler.disable
def _probe_spconv(device):
    """(True, None) when a 2-voxel SubMConv3d runs forward on ``device``, else (False, the error)."""
    try:
        spconv = import_spconv()
        conv = spconv.SubMConv3d(1, 1, 3, padding=1, bias=False, indice_key='probe').to(device)
        coords = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 1]], dtype=torch.int32, device=device)
        x = spconv.SparseConvTensor(torch.ones(2, 1, device=device), coords, [2, 2, 2], 1)
        with torch.no_grad():
            conv(x).features.sum().item()
    except Exception as exc:  # any failure means: do not run spconv here
        return False, f'{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ""}'
    return True, None


def spconv_unavailable_reason():
    """Why :func:`spconv_available` is False (None when it is True)."""
    if spconv_disabled():
        return f'{NO_SPCONV_ENV}=1 is set'
    return None if spconv_available() else f'spconv does not import ({_SPCONV_IMPORT.get("error")})'


def default_spconv_algo():
    """The spconv algorithm to build convolutions with: Native without CUDA, else spconv's default."""
    from spconv.core import ConvAlgo
    return ConvAlgo.Native if not torch.cuda.is_available() else None


def _current_stream_or_zero(get_stream):
    @functools.wraps(get_stream)
    def get_current_stream():
        if not torch.cuda.is_available():
            return 0
        return get_stream()

    get_current_stream.__fsdlite_shim__ = True
    return get_current_stream


def _make_contiguous(sparse_tensor):
    """spconv assumes row-major int32 indices and row-major features; enforce both in place."""
    indices = sparse_tensor.indices
    if indices.dtype != torch.int32 or not indices.is_contiguous():
        sparse_tensor.indices = indices.to(torch.int32).contiguous()
    if not sparse_tensor.features.is_contiguous():
        sparse_tensor = sparse_tensor.replace_feature(sparse_tensor.features.contiguous())
    return sparse_tensor


def _guard_conv_forward(conv_forward):
    """Use the Native algorithm for CPU inputs and a single thread for strided CPU convs."""
    from spconv.core import ConvAlgo

    @functools.wraps(conv_forward)
    def forward(self, input, *args, **kwargs):
        input = _make_contiguous(input)
        features = input.features
        if features.device.type != 'cpu':
            return conv_forward(self, input, *args, **kwargs)
        algo = self.algo
        if algo != ConvAlgo.Native:
            self.algo = ConvAlgo.Native
        try:
            if self.subm:
                return conv_forward(self, input, *args, **kwargs)
            with single_thread():
                return conv_forward(self, input, *args, **kwargs)
        finally:
            self.algo = algo

    forward.__fsdlite_shim__ = True
    return forward


def _guard_backward(backward_fn):
    """Single-thread guard for the backward of non-submanifold CPU convs (``subm`` is arg 6)."""

    @functools.wraps(backward_fn)
    def backward(features, *args, **kwargs):
        subm = kwargs.get('subm', args[5] if len(args) > 5 else False)
        if features.device.type == 'cpu' and not subm:
            with single_thread():
                return backward_fn(features, *args, **kwargs)
        return backward_fn(features, *args, **kwargs)

    backward.__fsdlite_shim__ = True
    return backward


@_once
def patch_spconv():
    """Apply the spconv CPU shims (stream for backward, Native algo, strided-conv thread guard)."""
    if not _spconv_imports():  # pragma: no cover
        return
    import spconv.pytorch.conv as spconv_conv
    import spconv.pytorch.ops as spconv_ops

    spconv_ops.get_current_stream = _current_stream_or_zero(spconv_ops.get_current_stream)
    conv_cls = spconv_conv.SparseConvolution
    conv_cls.forward = _guard_conv_forward(conv_cls.forward)
    # spconv.pytorch.functional calls ``ops.indice_conv_backward`` through the module.
    spconv_ops.indice_conv_backward = _guard_backward(spconv_ops.indice_conv_backward)
    init = conv_cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if kwargs.get('algo') is None:
            kwargs['algo'] = default_spconv_algo()
        init(self, *args, **kwargs)

    conv_cls.__init__ = __init__


def import_spconv():
    """Return ``spconv.pytorch`` with the CPU shims applied (the one way fsdlite imports spconv).

    spconv 2.3 uses ``torch.cuda.amp.custom_fwd`` at import, which torch 2.13 reports as a
    FutureWarning per decorated function, and ``torch.jit.script`` (DeprecationWarning);
    those import-time warnings are silenced here.
    """
    if not spconv_available():
        raise ImportError(f'spconv is needed here but {spconv_unavailable_reason()}; fsdlite\'s own sparse '
                          "convolutions need no spconv (SparseUNet(conv_backend='auto' or 'fsdlite'))")
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', category=FutureWarning)
        warnings.filterwarnings('ignore', category=DeprecationWarning)
        import spconv.pytorch as spconv_pytorch
    patch_spconv()
    return spconv_pytorch


#: onnxscript rewrite rules whose matching is quadratic in the graph's node count (see the module docstring)
QUADRATIC_ONNX_RULES = ('SlicesSplit',)


@contextlib.contextmanager
def onnx_export_rules():
    """Within the block, the optimizer of ``torch.onnx.export`` applies onnxscript's default rewrite rules less
    :data:`QUADRATIC_ONNX_RULES`; unchanged where onnxscript keeps its rules elsewhere."""
    try:
        from onnxscript import rewriter
    except ImportError:  # onnx export is an optional feature: torch.onnx reports the missing package itself
        rewriter = None
    rules = getattr(rewriter, '_DEFAULT_REWRITE_RULES', None)
    if rules is not None:
        rewriter._DEFAULT_REWRITE_RULES = tuple(rule for rule in rules
                                                if getattr(rule, 'name', None) not in QUADRATIC_ONNX_RULES)
    try:
        yield
    finally:
        if rules is not None:
            rewriter._DEFAULT_REWRITE_RULES = rules


def apply_all():
    """Apply every shim (idempotent)."""
    patch_mmengine_checkpoint_loading()
    patch_spconv()
