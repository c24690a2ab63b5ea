"""A sample batch for tracing and cost measurement: the first item(s) of one of the config's datasets."""
import copy

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
    """
    from mmengine.dataset import pseudo_collate
    from mmengine.registry import FUNCTIONS

    from fsdlite.registry import DATASETS

    loader = cfg.get(f'{split}_dataloader')
    if not loader or 'dataset' not in loader:
        raise SlimError(f'the config has no {split}_dataloader.dataset to take a sample from; use --split '
                        'train/val/test with a dataloader the config defines')
    dataset = DATASETS.build(copy.deepcopy(loader['dataset']))
    indices = [int(i) for i in indices]
    if not indices or min(indices) < 0 or max(indices) >= len(dataset):
        raise SlimError(f'--sample-index {indices}: the {split} dataset has {len(dataset)} items')
    collate = loader.get('collate_fn')
    collate = FUNCTIONS.get(collate['type']) if collate else pseudo_collate
    return model.data_preprocessor(collate([dataset[i] for i in indices]), False)


__all__ = ['build_sample']
