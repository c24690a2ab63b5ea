"""mmengine's samplers, refusing a dataset without samples.

Registered under mmengine's own names in fsdlite's scope, so every config (``default_scope = 'fsdlite'``) gets
them: with zero frames (an empty velodyne folder, an empty split file) mmengine's ``InfiniteSampler`` -- and an
iteration-based loop over ``DefaultSampler`` -- waited forever at 100 % CPU for a first batch.
"""
from mmengine.dataset import DefaultSampler as _DefaultSampler
from mmengine.dataset import InfiniteSampler as _InfiniteSampler

from ..registry import DATA_SAMPLERS
from ..utils.errors import DataError

_SOURCE_KEYS = ('data_root', 'ann_file', 'data_prefix')


def check_not_empty(dataset):
    """Raise :class:`DataError` when ``dataset`` has no samples, naming its class and where it reads from."""
    if len(dataset) > 0:
        return dataset
    source = ', '.join(f'{key}={getattr(dataset, key)!r}' for key in _SOURCE_KEYS if getattr(dataset, key, None))
    raise DataError(f'{type(dataset).__name__} has no samples{f" ({source})" if source else ""}; expected at least '
                    'one frame (an empty point folder or split file?)')


@DATA_SAMPLERS.register_module(name='InfiniteSampler')
class InfiniteSampler(_InfiniteSampler):
    """mmengine's ``InfiniteSampler``; an empty dataset raises :class:`DataError` instead of looping forever.

    Args:
        dataset (Sized): the dataset (at least one sample).
        shuffle (bool), seed (int, optional): as mmengine.
    """

    def __init__(self, dataset, shuffle=True, seed=None):
        super().__init__(check_not_empty(dataset), shuffle=shuffle, seed=seed)


@DATA_SAMPLERS.register_module(name='DefaultSampler')
class DefaultSampler(_DefaultSampler):
    """mmengine's ``DefaultSampler``; an empty dataset raises :class:`DataError` (an iteration-based loop would
    otherwise restart the empty epoch forever, and an evaluation would score nothing).

    Args:
        dataset (Sized): the dataset (at least one sample).
        shuffle (bool), seed (int, optional), round_up (bool): as mmengine.
    """

    def __init__(self, dataset, shuffle=True, seed=None, round_up=True):
        super().__init__(check_not_empty(dataset), shuffle=shuffle, seed=seed, round_up=round_up)


__all__ = ['InfiniteSampler', 'DefaultSampler', 'check_not_empty']
