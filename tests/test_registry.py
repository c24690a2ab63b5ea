"""Tests of fsdlite.registry: every mmengine root mirrored, scope switching, helpful unknown-type errors."""
import subprocess
import sys

import mmengine.registry.root as mmengine_roots
import pytest
import torch
from mmengine.registry import DefaultScope

import fsdlite.registry as registry

ROOT_NAMES = sorted(n for n in dir(mmengine_roots) if n.isupper())


@pytest.mark.parametrize('name', ROOT_NAMES)
def test_every_mmengine_root_has_a_child(name):
    child = getattr(registry, name)
    assert child.parent is getattr(mmengine_roots, name)
    assert child.scope == 'fsdlite'
    assert child._locations and all(loc.startswith('fsdlite.') for loc in child._locations)


def test_unknown_type_names_registry_and_suggests_close_names():
    @registry.MODELS.register_module(name='RegistryTestDummyNet', force=True)
    class Dummy(torch.nn.Module):
        pass

    with pytest.raises(KeyError) as info:
        registry.MODELS.build(dict(type='RegistryTestDumyNet'))
    message = str(info.value)
    assert "fsdlite::model" in message and 'RegistryTestDumyNet' in message
    assert 'RegistryTestDummyNet' in message  # the suggestion


def test_unknown_type_without_close_names_still_names_registry():
    with pytest.raises(KeyError, match="fsdlite::metric"):
        registry.METRICS.build(dict(type='zzzzqqqq'))


def test_root_build_under_fsdlite_scope_reaches_parent_components():
    params = [torch.nn.Parameter(torch.zeros(2))]
    with DefaultScope.overwrite_default_scope('fsdlite'):
        optimizer = mmengine_roots.OPTIMIZERS.build(dict(type='SGD', params=params, lr=0.1))
    assert isinstance(optimizer, torch.optim.SGD)


def test_locations_import_components_lazily():
    # Building by name must not need a manual import of the defining module.
    assert registry.DATASETS.get('ConcatDataset') is not None  # from the mmengine parent
    registry.MODELS.import_from_location()


def test_deploy_adapters_registry_imports_its_location(tmp_path):
    # a fresh interpreter: looking an adapter up imports fsdlite.deploy (the registry's location) by itself
    code = ('from fsdlite.registry import DEPLOY_ADAPTERS\n'
            'print(DEPLOY_ADAPTERS.get("FSDv2Lite").__name__, DEPLOY_ADAPTERS.get("KPCNN").__name__)\n')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.split() == ['DetectorAdapter', 'KPCNNAdapter']
    assert registry.DEPLOY_ADAPTERS.scope == 'fsdlite' and registry.DEPLOY_ADAPTERS._locations == ['fsdlite.deploy']
