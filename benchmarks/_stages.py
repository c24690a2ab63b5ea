"""Per-stage wall-clock time of a detector, measured from outside the model.

The models carry no timers: :func:`record_stages` wraps, on one model instance and for the length of a ``with``
block, the calls that make up each stage (a submodule's ``forward`` or a method) and restores them afterwards.
A stage is billed its own time: a timed call made inside another timed call is subtracted from the outer one, so
the stages add up to the time spent inside any of them. On a GPU the recorder takes a ``synchronize`` function
(``torch.cuda.synchronize``), called at both ends of every timed call, so a stage is billed for its own kernels
and not for those queued before it.
"""
import importlib
import time
from collections import defaultdict
from contextlib import contextmanager

import torch

# stage -> (path of the object, method) of the FSD-lite / FSDv2-lite calls that make it up; '' is the model, a path
# starting with 'fsdlite.' a module (its function is timed where the module's own code calls it).
# '__call__' times calls of a plain callable object (no nn.Module, so no ``forward`` to wrap).
# 'factory().method' times that method of every object the factory returns while the block runs (the mixer's
# kernel maps are built by the ConvPlan its conv_plan() hands out).
# 'instances' is what instances() does (in either execution mode) outside the timed calls within them: FSD-lite's
# grouping of voted centres (and SIR's gathers), FSDv2-lite's voxelization of the virtual points.
DETECTOR_STAGES = {
    'pre_ops': [('fsdlite.deploy.fixed_shape', 'fixed_inputs')],
    'vfe': [('voxel_encoder', 'forward')],
    'backbone': [('backbone', 'forward')],
    'neck_head': [('neck', 'forward'), ('seg_head', 'forward')],
    'fg_sampling': [('fg_sampler', '__call__')],
    'instances': [('', 'instances')],
    'sir': [('sir', 'forward')],
    'virtual_voxels': [('virtual_encoder', 'forward'), ('virtual_vfe', 'forward')],
    'mixer_rulebooks': [('mixer', 'conv_plan().build_rulebooks'), ('mixer', 'conv_plan().build_pair_lists'),
                        ('mixer', 'conv_plan().tiled_kernel_maps'), ('mixer', 'conv_plan().dense_kernel_maps')],
    'mixer': [('mixer', 'forward')],
    'box_head': [('bbox_head', 'forward'), ('bbox_head', 'select')],
    'refiner': [('refiner', 'forward')],
    'nms': [('bbox_head', 'predict'), ('bbox_head', 'nms')],
}


class _TimedCallable:
    """Stands in for a plain callable object while it is timed: calls go to ``call``, attributes to ``target``."""

    def __init__(self, target, call):
        self._target, self._call = target, call

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._target, name)


def _resolve(model, path):
    obj = model
    for name in filter(None, path.split('.')):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


@contextmanager
def record_stages(model, synchronize=None, stages=None):
    """Time the stages of ``model`` inside the block: yields a dict ``stage -> seconds`` (summed over calls).

    Args:
        model (nn.Module): the detector; calls it lacks (FSD-lite has no mixer) are skipped.
        synchronize (callable, optional): waits for the device's queued work (``torch.cuda.synchronize``).
        stages (dict, optional): ``stage -> [(object path, method)]`` (default :data:`DETECTOR_STAGES`).
    """
    record = defaultdict(float)
    open_calls = []  # [stage, seconds of the timed calls nested in it]

    def timed(name, fn):
        def call(*args, **kwargs):
            if synchronize is not None:
                synchronize()
            open_calls.append([name, 0.0])
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if synchronize is not None:
                    synchronize()
                elapsed = time.perf_counter() - start
                _, nested = open_calls.pop()
                record[name] += elapsed - nested
                if open_calls:
                    open_calls[-1][1] += elapsed
        return call

    patched, proxied, replaced = [], [], []
    made = defaultdict(list)  # (path, factory) -> [(stage, method)] timed on each object the factory returns
    for name, calls in (stages or DETECTOR_STAGES).items():
        for path, method in calls:
            if path.startswith('fsdlite.'):
                module = importlib.import_module(path)
                fn = getattr(module, method)
                setattr(module, method, timed(name, fn))
                replaced.append((module, method, fn))
                continue
            if '().' in method:
                factory, _, produced = method.partition('().')
                made[path, factory].append((name, produced))
                continue
            obj = _resolve(model, path)
            if obj is None or (method == '__call__' and (isinstance(obj, torch.nn.Module) or not callable(obj))):
                continue
            if method == '__call__':  # Python looks __call__ up on the type: stand in for the object itself
                parent, _, attr = path.rpartition('.')
                parent = _resolve(model, parent)
                setattr(parent, attr, _TimedCallable(obj, timed(name, obj)))
                proxied.append((parent, attr, obj))
                continue
            fn = getattr(obj, method, None)
            if fn is None or method in vars(obj):
                continue
            setattr(obj, method, timed(name, fn))  # an instance attribute: shadows the class's method
            patched.append((obj, method))
    for (path, factory), methods in made.items():
        obj = _resolve(model, path)
        make = getattr(obj, factory, None) if obj is not None else None
        if make is None or factory in vars(obj):
            continue

        def make_timed(*args, _make=make, _methods=methods, **kwargs):
            product = _make(*args, **kwargs)
            for name, method in _methods:
                fn = getattr(product, method, None)
                if fn is not None:
                    setattr(product, method, timed(name, fn))
            return product
        setattr(obj, factory, make_timed)
        patched.append((obj, factory))
    try:
        yield record
    finally:
        for parent, attr, obj in proxied + replaced:
            setattr(parent, attr, obj)
        for obj, method in patched:
            delattr(obj, method)


__all__ = ['record_stages', 'DETECTOR_STAGES']
