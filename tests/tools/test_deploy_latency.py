"""benchmarks/deploy_latency.py: the detector copy without its box refiner that the benchmark times beside it."""
import torch
from mmengine.config import Config

from fsdlite.registry import MODELS


def test_the_case_without_refiner_drops_its_module_bound_and_weights(load_benchmark, tmp_path):
    deploy_latency = load_benchmark('deploy_latency')
    full = torch.nn.Linear(2, 2).state_dict()
    torch.save(dict(state_dict={'backbone.w': full['weight'], 'refiner.reg.weight': full['weight']}, meta={}),
               tmp_path / 'trained.pth')
    case = dict(deploy_latency.CASES['FSD-lite'], checkpoint=str(tmp_path / 'trained.pth'))
    plain = deploy_latency.without_refiner_case(case, tmp_path / 'work')
    bounds = Config.fromfile(case['config']).model.bounds
    assert 'max_refiner_pairs' in bounds  # the shipped config packs the refiner's pairs
    model = MODELS.build(Config.fromfile(plain['config']).model)
    assert model.refiner is None and 'max_refiner_pairs' not in model.bounds
    assert set(model.bounds) == set(bounds) - {'max_refiner_pairs'}
    assert list(torch.load(plain['checkpoint'])['state_dict']) == ['backbone.w']
    assert deploy_latency.without_refiner_case(dict(deploy_latency.CASES['FSDv2-lite']), tmp_path) is None
