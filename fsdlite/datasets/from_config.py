"""Items and batches of a config's own datasets (``<split>_dataloader.dataset``): the one helper the tools, the
slimming engine and the deploy adapters use to take data from a config outside a Runner."""
import copy

from mmengine.dataset import pseudo_collate
from mmengine.registry import FUNCTIONS as MMENGINE_FUNCTIONS

from ..registry import DATASETS
from ..utils.errors import DataError


def config_dataset(cfg, splits=('val',), what='a dataset'):
    """The dataset of the first of ``splits`` whose dataloader the config defines.

    Args:
        cfg (mmengine.Config): the full config (its dataloaders).
        splits (Sequence[str]): 'train', 'val', 'test', in order of preference.
        what (str): what the data is for, named in the error.
    Returns:
        tuple: ``(dataset, split, collate)``; ``collate`` is the dataloader's ``collate_fn`` (mmengine's
        ``pseudo_collate`` when it sets none).
    Raises:
        DataError: none of the splits has a dataloader with a dataset.
    """
    for split in splits:
        loader = cfg.get(f'{split}_dataloader')
        if loader and 'dataset' in loader:
            collate = loader.get('collate_fn')
            collate = MMENGINE_FUNCTIONS.get(collate['type']) if collate else pseudo_collate
            return DATASETS.build(copy.deepcopy(loader['dataset'])), split, collate
    wanted = ' or '.join(f'{split}_dataloader.dataset' for split in splits)
    raise DataError(f'the config has no {wanted} ({what})')


def config_batches(cfg, split, indices, batch_size=1, model=None, what='dataset items', clip=False):
    """Batches of the items ``indices`` of the config's ``split`` dataset, collated as its dataloader collates and,
    with ``model``, preprocessed as in evaluation (``model.data_preprocessor(batch, False)``).

    Args:
        cfg (mmengine.Config): the full config.
        split (str): 'train', 'val' or 'test'.
        indices (Iterable[int] | None): dataset items, in batch order; None: every item.
        batch_size (int): items per batch (the last batch may be smaller).
        model (nn.Module, optional): its data preprocessor prepares each batch.
        what (str): what asked for the items (an option name), named in the errors.
        clip (bool): drop the indices beyond the dataset instead of raising.
    Returns:
        tuple: ``(batches, count)``: an iterator building one batch at a time, and the number of items it covers.
    Raises:
        DataError: no such dataset, no items, or (without ``clip``) an index outside the dataset.
    """
    dataset, _, collate = config_dataset(cfg, (split,), what)
    indices = range(len(dataset)) if indices is None else [int(i) for i in indices]
    outside = [i for i in indices if not 0 <= i < len(dataset)]
    if outside and not clip:
        raise DataError(f'{what}: items {outside} are outside the {split} dataset ({len(dataset)} items)')
    indices = [i for i in indices if 0 <= i < len(dataset)]
    if not indices:
        raise DataError(f'{what}: no items of the {split} dataset ({len(dataset)} items) were asked for')

    def batches():
        for start in range(0, len(indices), batch_size):
            batch = collate([dataset[i] for i in indices[start:start + batch_size]])
            yield batch if model is None else model.data_preprocessor(batch, False)

    return batches(), len(indices)


__all__ = ['config_dataset', 'config_batches']
