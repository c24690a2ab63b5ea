"""A sample batch for tracing and cost measurement: the first item(s) of one of the config's datasets."""
import copy

from .errors import SlimError


def _dataset_and_collate(cfg, split, purpose='take a sample from; use --split train/val/test with a dataloader '
                                             'the config defines'):
    from mmengine.dataset import pseudo_collate
    from mmengine.registry import FUNCTIONS

    from fsdlite.registry import DATASETS

    loader = cfg.get(f'{split}_dataloader')
    if not loader or 'dataset' not in loader:
        raise SlimError(f'the config has no {split}_dataloader.dataset to {purpose}')
    collate = loader.get('collate_fn')
    collate = FUNCTIONS.get(collate['type']) if collate else pseudo_collate
    return DATASETS.build(copy.deepcopy(loader['dataset'])), collate


def build_sample(cfg, model, indices=(0,), split='val'):
    """Preprocessed batch of ``indices`` of ``<split>_dataloader.dataset`` (``model.data_preprocessor(batch, False)``).

    Args:
        cfg (mmengine.Config): the full config (its dataloaders).
        model: the built model (its data preprocessor collates/voxelizes).
        indices (Sequence[int]): dataset items in the batch.
        split (str): 'val', 'test' or 'train'.
    Returns:
        dict: ``inputs`` and ``data_samples`` as the model's forward takes them.
    """
    dataset, collate = _dataset_and_collate(cfg, split)
    indices = [int(i) for i in indices]
    if not indices or min(indices) < 0 or max(indices) >= len(dataset):
        raise SlimError(f'--sample-index {indices}: the {split} dataset has {len(dataset)} items')
    return model.data_preprocessor(collate([dataset[i] for i in indices]), False)


def calibration_batches(cfg, model, count, split='train', batch_size=4):
    """The first ``count`` items of ``<split>_dataloader.dataset`` as preprocessed batches of ``batch_size``.

    Returns:
        tuple: (iterator over the batches, built one at a time as :func:`build_sample` makes them; number of items:
        fewer when the dataset is shorter).
    Raises:
        SlimError: ``count`` is not a positive integer or the split has no dataset.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise SlimError(f'--calibration-items expects a positive number of dataset items, got {count!r}')
    dataset, collate = _dataset_and_collate(cfg, split, 'calibrate on; use --calibration-items 0 for plain slicing')
    items = list(range(min(count, len(dataset))))
    return (model.data_preprocessor(collate([dataset[i] for i in items[j:j + batch_size]]), False)
            for j in range(0, len(items), batch_size)), len(items)


__all__ = ['build_sample', 'calibration_batches']
