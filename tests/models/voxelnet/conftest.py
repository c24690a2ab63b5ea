"""Shared fixtures of the VoxelNet tests: the real config's model at tiny sizes."""
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

import fsdlite.models  # noqa: F401  (registers the components)
from fsdlite.registry import MODELS

CONFIG = Path(__file__).resolve().parents[3] / 'configs' / 'voxelnet' / 'voxelnet_random_blocks.py'


@pytest.fixture(scope='session')
def voxelnet_cfg():
    """The training config (model widths and k exactly as configured)."""
    return Config.fromfile(str(CONFIG))


@pytest.fixture
def build_voxelnet(voxelnet_cfg):
    """``build(**overrides) -> VoxelNet`` from the config's model, seeded, float64 unless asked otherwise."""

    def build(dtype=torch.float64, seed=0, **overrides):
        torch.manual_seed(seed)
        cfg = voxelnet_cfg.model.to_dict()
        cfg.update(overrides)
        return MODELS.build(cfg).to(dtype)

    return build


def random_inputs(b, v, m, dtype=torch.float64, seed=0):
    """Physically scaled random inputs: (B, V, M, 9) features and (B, V, 3) voxel centres."""
    gen = torch.Generator().manual_seed(seed)
    feats = torch.rand(b, v, m, 9, generator=gen, dtype=dtype)
    feats[..., :2] *= 0.05                     # angles
    feats[..., 2:4] = (feats[..., 2:4] - 0.5) * 0.01
    feats[..., 4] = 10 ** (4 * feats[..., 4] - 2)
    feats[..., 5:8] = feats[..., 5:8] * 2 - 1
    feats[..., 8] = feats[..., 5:8].norm(dim=-1)
    centres = torch.rand(b, v, 3, generator=gen, dtype=dtype)
    return feats, centres


@pytest.fixture
def inputs():
    return random_inputs
