"""fsdlite.datasets.from_config: a config's datasets and batches, outside a Runner."""
import pytest
from mmengine.config import Config

from fsdlite.datasets.from_config import config_batches, config_dataset
from fsdlite.registry import DATASETS
from fsdlite.utils.errors import DataError


@DATASETS.register_module(name='FromConfigToyDataset', force=True)
class ToyDataset:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return dict(inputs=i, data_samples=f's{i}')


class Doubling:
    """A model whose data preprocessor marks what it saw."""

    @staticmethod
    def data_preprocessor(batch, training):
        assert training is False
        return dict(batch, inputs=[2 * i for i in batch['inputs']])


def cfg(**loaders):
    return Config({f'{split}_dataloader': dict(dataset=dict(type='FromConfigToyDataset', n=n))
                   for split, n in loaders.items()})


def test_the_first_split_with_a_dataset_and_its_collate():
    dataset, split, collate = config_dataset(cfg(val=3, test=5), ('test', 'val'))
    assert (len(dataset), split) == (5, 'test')
    assert collate([dataset[0], dataset[1]]) == dict(inputs=[0, 1], data_samples=['s0', 's1'])  # pseudo_collate
    with pytest.raises(DataError, match=r'the config has no train_dataloader.dataset \(calibration\)'):
        config_dataset(cfg(val=3), ('train',), 'calibration')


def test_batches_collated_and_preprocessed():
    batches, count = config_batches(cfg(val=5), 'val', [4, 0, 2], batch_size=2, model=Doubling())
    assert count == 3 and list(batches) == [dict(inputs=[8, 0], data_samples=['s4', 's0']),
                                            dict(inputs=[4], data_samples=['s2'])]
    batches, count = config_batches(cfg(val=3), 'val', None)
    assert count == 3 and [b['inputs'] for b in batches] == [[0], [1], [2]]


def test_indices_outside_the_dataset():
    with pytest.raises(DataError, match=r'--sample-index: items \[7\] are outside the val dataset \(3 items\)'):
        config_batches(cfg(val=3), 'val', [0, 7], what='--sample-index')
    batches, count = config_batches(cfg(val=3), 'val', range(10), batch_size=4, clip=True)
    assert count == 3 and [b['inputs'] for b in batches] == [[0, 1, 2]]
    with pytest.raises(DataError, match='no items of the val dataset'):
        config_batches(cfg(val=0), 'val', range(4), clip=True)
