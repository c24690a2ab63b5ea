"""Argument validation shared by every op wrapper.

Each helper raises before any kernel runs, with a message that names the op, the
argument, the offending value and what was expected (:class:`OpTypeError` for wrong
types/dtypes, :class:`OpValueError` for wrong shapes/values/devices). Both are also
``RuntimeError``s, the type torch and torch_scatter raise for bad arguments, so code
written for either catches them.
"""
import functools
import inspect
import math
import numbers
import os

import torch

from . import build

INDEX_DTYPES = (torch.int32, torch.int64)


def is_exporting():
    """True while torch.compile/torch.export, TorchScript tracing/scripting or ONNX export runs the caller, or while
    a CUDA graph is captured: no host reads then (value checks are skipped; bounds truncate and count)."""
    return bool(torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting()
                or torch.onnx.is_in_onnx_export()
                or (torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()))


class OpValueError(ValueError, RuntimeError):
    """A bad argument value, shape or device: a ``ValueError`` that is also the ``RuntimeError`` torch raises."""


class OpTypeError(TypeError, RuntimeError):
    """A bad argument type or dtype: a ``TypeError`` that is also the ``RuntimeError`` torch raises."""


def tensor(op, name, value, *, dtype=None, dtypes=None, floating=False, dim=None, min_dim=None,
           size=None):
    """Check ``value`` is a tensor with the requested properties and return it.

    Args:
        op (str): op name used in messages.
        name (str): argument name used in messages.
        value: the argument.
        dtype (torch.dtype): exact dtype required.
        dtypes (tuple): allowed dtypes.
        floating (bool): require a floating-point dtype.
        dim (int): exact number of dimensions.
        min_dim (int): minimum number of dimensions.
        size (dict): ``{axis: expected}`` sizes; ``expected`` may be ``(int, 'what')``.
    """
    if not isinstance(value, torch.Tensor):
        raise OpTypeError(f'{op}: {name} must be a torch.Tensor, got {type(value).__name__}')
    if dtype is not None and value.dtype != dtype:
        raise OpTypeError(f'{op}: {name} must have dtype {dtype}, got {value.dtype}')
    if dtypes is not None and value.dtype not in dtypes:
        raise OpTypeError(f'{op}: {name} must have one of the dtypes {list(dtypes)}, got {value.dtype}')
    if floating and not value.is_floating_point():
        raise OpTypeError(f'{op}: {name} must be a floating-point tensor, got {value.dtype}')
    if dim is not None and value.dim() != dim:
        raise OpValueError(f'{op}: {name} must be {dim}-D, got shape {tuple(value.shape)}')
    if min_dim is not None and value.dim() < min_dim:
        raise OpValueError(f'{op}: {name} must have at least {min_dim} dimensions, got shape {tuple(value.shape)}')
    for axis, expected in (size or {}).items():
        what = ''
        if isinstance(expected, tuple):
            expected, what = expected
            what = f' ({what})'
        if value.shape[axis] != expected:
            raise OpValueError(f'{op}: {name}.shape[{axis}] must be {expected}{what}, got shape {tuple(value.shape)}')
    return value


def same_device(op, **tensors):
    """Check all given tensors share one device."""
    devices = {name: t.device for name, t in tensors.items() if isinstance(t, torch.Tensor)}
    if len(set(devices.values())) > 1:
        listing = ', '.join(f'{n} on {d}' for n, d in devices.items())
        raise OpValueError(f'{op}: all tensors must be on one device, got {listing}')


def index_range(op: str, name: str, index: torch.Tensor, low: int, high: int) -> None:
    """Check every value of an integer tensor lies in ``[low, high)`` (TorchScript-compatible).

    Only for index arguments that no kernel checks as given (composites such as the torch_scatter API, which
    hand the kernel derived ids, or torch.gather): an index a C++ op receives is checked there, once
    (``check_index_range`` in ``ops/include/fsdlite_ops/common.h``), so wrappers do not read it here -- that
    would be a second pass and, on CUDA, two host synchronisations.
    """
    if index.numel() == 0:
        return
    lo, hi = int(index.min()), int(index.max())
    if lo < low or hi >= high:
        bad = lo if lo < low else hi
        raise OpValueError(f'{op}: {name} contains {bad}, expected values in [{low}, {high})')


def finite_positive(op, name, value, *, allow_zero=False):
    """Check a scalar (or each value of a sequence) is finite and positive; returns floats."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise OpTypeError(f'{op}: {name} must be a number or a sequence of numbers, got {value!r}') from None
        if not math.isfinite(f) or f < 0 or (f == 0 and not allow_zero):
            bound = '>= 0' if allow_zero else '> 0'
            raise OpValueError(f'{op}: {name} must be finite and {bound}, got {value!r}')
        out.append(f)
    return out if isinstance(value, (list, tuple)) else out[0]


def positive_int(op, name, value, *, allow_zero=False):
    """Check ``value`` is a (non-bool) integer > 0 (or >= 0) and return it as int."""
    if isinstance(value, bool) or not isinstance(value, (int,)) and not (
            isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point()):
        raise OpTypeError(f'{op}: {name} must be an int, got {type(value).__name__} {value!r}')
    value = int(value)
    if value < 0 or (value == 0 and not allow_zero):
        raise OpValueError(f'{op}: {name} must be {">= 0" if allow_zero else "> 0"}, got {value}')
    return value


def choice(op, name, value, allowed):
    """Check ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise OpValueError(f'{op}: {name} must be one of {list(allowed)}, got {value!r}')
    return value


def finite(op, name, value):
    """Check every value of a floating tensor is finite (no NaN or inf)."""
    if value.numel() and not bool(torch.isfinite(value).all()):
        bad = value[~torch.isfinite(value)].flatten()[0].item()
        raise OpValueError(f'{op}: {name} must contain only finite values, got {bad}')


def batch_ids(op, name, batch, length, length_what):
    """Check optional per-row sample ids are a (length,) int64 tensor; returns it (or None).

    That they are sorted non-decreasing is checked by the C++ op (``neighbors::check_batch``), once.
    """
    if batch is None:
        return None
    tensor(op, name, batch, dtype=torch.int64, dim=1, size={0: (length, length_what)})
    return batch


def point_sets(op, query, support, query_batch, support_batch):
    """Check (Nq, D) query and (Ns, D) support coordinates (float32/64, D >= 1) with optional batch ids.

    Batch ids must be given for both point sets or for neither. The values (finite coordinates, sorted batch ids)
    are checked by the C++ op (``ops/knn/neighbor_args.h``), once.
    """
    for name, value in (('query', query), ('support', support)):
        tensor(op, name, value, dtypes=(torch.float32, torch.float64), dim=2)
    if query.shape[1] < 1:
        raise OpValueError(f'{op}: query must have at least one coordinate column (D >= 1), got shape '
                         f'{tuple(query.shape)}')
    if support.dtype != query.dtype:
        raise OpTypeError(f'{op}: support must have the dtype of query ({query.dtype}), got {support.dtype}')
    tensor(op, 'support', support, size={1: (query.shape[1], 'query.shape[1], the dimension D')})
    if (query_batch is None) != (support_batch is None):
        given = 'query_batch' if support_batch is None else 'support_batch'
        raise OpValueError(f'{op}: query_batch and support_batch must be given together, got only {given}')
    same_device(op, query=query, support=support, query_batch=query_batch, support_batch=support_batch)
    batch_ids(op, 'query_batch', query_batch, query.shape[0], 'query.shape[0]')
    batch_ids(op, 'support_batch', support_batch, support.shape[0], 'support.shape[0]')


def float_sequence(op, name, value, length):
    """Check ``value`` is a sequence (list/tuple/1-D tensor/array) of ``length`` finite numbers; return floats."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().reshape(-1).tolist() if value.dim() <= 1 else value
    elif hasattr(value, 'tolist') and not isinstance(value, (list, tuple)):
        value = value.tolist()  # numpy arrays
    if not isinstance(value, (list, tuple)) or len(value) != length:
        raise OpValueError(f'{op}: {name} must be a sequence of {length} numbers, got {value!r}')
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise OpTypeError(f'{op}: {name} must contain only numbers, got {value!r}')
        if not math.isfinite(v):
            raise OpValueError(f'{op}: {name} must contain only finite numbers, got {value!r}')
        out.append(float(v))
    return out


def min_size(op, name, value, axis, minimum, what=''):
    """Check ``value.shape[axis] >= minimum`` (``what`` describes the required columns)."""
    if value.shape[axis] < minimum:
        what = f' ({what})' if what else ''
        raise OpValueError(f'{op}: {name}.shape[{axis}] must be >= {minimum}{what}, got shape {tuple(value.shape)}')
    return value


def int_sequence(op, name, value, length, minimum=None):
    """Check ``value`` is an int (broadcast) or a sequence of ``length`` ints, each ``>= minimum``; return a list."""
    if type(value) is int:  # the common cases first, without the abstract-class checks below
        values = [value] * length
    elif type(value) in (list, tuple) and len(value) == length and all(type(v) is int for v in value):
        values = list(value)
    else:
        values = _general_int_sequence(op, name, value, length)
    if minimum is not None and any(v < minimum for v in values):
        raise OpValueError(f'{op}: {name} must be >= {minimum} on every axis, got {value!r}')
    return values


def _general_int_sequence(op, name, value, length):
    """:func:`int_sequence` for any integer types (numpy, tensors): the checked values as a list of ints."""
    values = [value] * length if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    if not isinstance(values, (list, tuple)) or len(values) != length or any(
            isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in values):
        raise OpTypeError(f'{op}: {name} must be an int or a sequence of {length} ints, got {value!r}')
    return [int(v) for v in values]


INT64_MAX = 2 ** 63 - 1


def output_rows(op: str, name: str, value: int, row_numel: int, row_what: str) -> int:
    """Check an output of ``value`` rows of ``row_numel`` elements each can exist (element count fits in int64;
    TorchScript-compatible).

    ``value`` is the argument (``name``) that sets the number of rows; ``row_what`` says what sets a row's size.
    """
    per_row = max(int(row_numel), 1)
    if value > 9223372036854775807 // per_row:  # INT64_MAX (TorchScript reads no global constants)
        raise OpValueError(f'{op}: {name}={value} gives an output of {value} x {row_numel} ({row_what}) elements, '
                           f'more than int64 can count; expected {name} * {per_row} < 2^63')
    return value


def device_memory_bytes(device):
    """Total memory of a device in bytes (CPU: physical RAM; CUDA: the card's memory), or None where unknown
    ('meta', other backends). Reads no tensor and never synchronises."""
    device = torch.device(device)
    if device.type == 'cpu':
        try:
            return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
        except (ValueError, OSError, AttributeError):
            return None
    if device.type == 'cuda':
        return torch.cuda.get_device_properties(device).total_memory
    return None


def _bytes(n):
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if n < 1024 or unit == 'TiB':
            return f'{n:.0f} {unit}' if unit == 'B' else f'{n:.1f} {unit}'
        n /= 1024


def output_memory(op, name, value, row_numel, row_what, element_size, device):
    """:func:`output_rows`, then check the output (``element_size`` bytes per element) fits in the device's total
    memory: a size no allocation can satisfy is reported naming the argument, instead of the allocator's
    'can't allocate memory' that names none.

    Returns:
        int: ``value``.
    """
    output_rows(op, name, value, row_numel, row_what)
    if torch.compiler.is_compiling():  # traced graphs meet the allocator's own error at run time
        return value
    total = device_memory_bytes(device)
    needed = value * max(int(row_numel), 1) * element_size
    if total is not None and needed > total:
        raise OpValueError(f'{op}: {name}={value} asks for an output of {value} x {row_numel} ({row_what}) elements '
                           f'= {_bytes(needed)}, more than the {_bytes(total)} of memory on {torch.device(device)}; '
                           f'expected a smaller {name}')
    return value


def register_fake(qualname, *, any_device=()):
    """``torch.library.register_fake`` whose fake kernel first checks that the tensor arguments share one device.

    A raw ``torch.ops.fsdlite.*`` call that mixes meta and real tensors dispatches to the fake kernel, which
    would return uninitialised real tensors instead of failing; with this wrapper it raises the same error as
    :func:`same_device`. ``any_device`` names arguments the op accepts on any real device (copied to the host);
    they are checked only when on 'meta'. Registered when the op's library loads
    (:func:`fsdlite.ops.build.when_loaded`).
    """
    op = qualname.split('::')[-1]

    def decorate(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            same_device(op, **{k: v for k, v in bound.arguments.items()
                               if k not in any_device or getattr(v, 'is_meta', False)})
            return fn(*args, **kwargs)

        build.when_loaded(qualname, lambda: torch.library.register_fake(qualname)(checked))
        return fn

    return decorate
