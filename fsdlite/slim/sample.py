"""A sample batch for tracing and cost measurement: the first item(s) of one of the config's datasets
(:func:`fsdlite.datasets.from_config.config_batches`)."""
from ..datasets.from_config import config_batches
from .errors import SlimError


def build_sample(cfg, model, indices=(0,), split='val'):
    """Preprocessed batch of ``indices`` of ``<split>_dataloader.dataset`` (``model.data_preprocessor(batch, False)``).

    Args:
        cfg (mmengine.Config): the full config (its dataloaders).
        model: the built model (its data preprocessor collates/voxelizes).
        indices (Sequence[int]): dataset items in the batch.
        split (str): 'val', 'test' or 'train'.
    Returns:
        dict: ``inputs`` and ``data_samples`` as the model's forward takes them.
    Raises:
        DataError: the split has no dataset, or an index is outside it.
    """
    indices = list(indices)
    batches, _ = config_batches(cfg, split, indices, max(len(indices), 1), model,
                                what=f'--sample-index {indices} (--split {split})')
    return next(batches)


def calibration_batches(cfg, model, count, split='train', batch_size=4):
    """The first ``count`` items of ``<split>_dataloader.dataset`` as preprocessed batches of ``batch_size``.

    Returns:
        tuple: (iterator over the batches, built one at a time as :func:`build_sample` makes them; number of items:
        fewer when the dataset is shorter).
    Raises:
        SlimError: ``count`` is not a positive integer; DataError: the split has no dataset.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise SlimError(f'--calibration-items expects a positive number of dataset items, got {count!r}')
    return config_batches(cfg, split, range(count), batch_size, model, clip=True,
                          what='--calibration-items (0: plain slicing)')


__all__ = ['build_sample', 'calibration_batches']
