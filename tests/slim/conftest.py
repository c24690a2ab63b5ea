"""Fixtures of the slimming tests: tiny versions of the real family configs (``--cfg-options`` style) and a
per-session cache of their traced analyses (tracing + config probing is the expensive part)."""
import types
from pathlib import Path

import pytest
from torch import nn

REPO = Path(__file__).resolve().parents[2]
_LIDAR = {'val_dataloader.dataset.lidar.num_beams': 16, 'val_dataloader.dataset.lidar.azimuth_resolution': 0.6,
          'val_dataloader.dataset.num_frames': 2}
_UNET = {'model.backbone.base_channels': 8, 'model.backbone.encoder_channels': ((8,), (16, 16), (16,)),
         'model.backbone.decoder_channels': ((16, 16, 16), (16, 16, 8), (8, 8, 8)),
         'model.voxel_encoder.feat_channels': (8, 8)}
_FSD = dict(_LIDAR, **_UNET, **{'model.seg_head.hidden_channels': (16,),
                                'model.sir.block_channels': ((16, 16), (16, 16), (16, 16)),
                                'model.sir.rel_channels': (8,), 'model.bbox_head.shared_channels': (32,),
                                'model.refiner.sir.block_channels': ((16, 16),), 'model.refiner.shared_channels': (16,)})
FAMILIES = {
    'segmentor': ('configs/segmentation/sparse_segmentor_synthetic.py',
                  dict(_LIDAR, **_UNET, **{'model.seg_head.hidden_channels': (16, 16)})),
    'fsd': ('configs/fsd/fsdlite_synthetic.py', _FSD),
    'fsd_static': ('configs/fsd/fsdlite_synthetic_static.py', _FSD),  # a config with fixed-shape bounds
    'fsdv2': ('configs/fsdv2/fsdv2lite_synthetic.py',
              dict(_LIDAR, **_UNET, **{'model.seg_head.hidden_channels': (16,),
                                       'model.virtual_encoder.out_channels': 8,
                                       'model.virtual_vfe.feat_channels': (8, 8),
                                       'model.mixer.base_channels': 8,
                                       'model.mixer.encoder_channels': ((8,), (16,)),
                                       'model.mixer.decoder_channels': ((16, 16, 16), (16, 16, 8)),
                                       'model.bbox_head.shared_channels': (16,)})),
    'voxelnet': ('configs/voxelnet/voxelnet_random_blocks.py',
                 {'val_dataloader.dataset.num_volumes': 2, 'val_dataloader.dataset.grid_shape': (3, 3, 2),
                  'val_dataloader.dataset.num_muons': 40, 'val_dataloader.batch_size': 1,
                  'model.muon_stage.gravnet.hidden_channels': (16, 16), 'model.muon_stage.gravnet.out_channels': 16,
                  'model.muon_stage.gravnet.k': 8, 'model.muon_stage.collapse.out_channels': 8,
                  'model.muon_stage.collapse.attn_channels': 4,
                  'model.voxel_stage.gravnet.in_channels': 20, 'model.voxel_stage.gravnet.k': 6,
                  'model.voxel_stage.gravnet.hidden_channels': (16, 16), 'model.voxel_stage.gravnet.out_channels': 16,
                  'model.voxel_stage.collapse.out_channels': 8, 'model.voxel_stage.collapse.attn_channels': 4,
                  'model.head.attn_channels': 4}),
    'kpcnn': ('configs/kpconv/kpcnn_kpconv_shapes.py',
              {'val_dataloader.dataset.num_samples': 2, 'val_dataloader.batch_size': 2,
               'val_dataloader.dataset.num_points': (200, 300), 'model.backbone.channels': (8, 16, 16, 32),
               'model.backbone.blocks': (1, 2, 1, 2), 'model.backbone.conv_defaults.kernel_size': 5,
               'model.head_channels': (16,)}),
    'kpcnn_x': ('configs/kpconv/kpcnn_kpconvx_shapes.py',
                {'val_dataloader.dataset.num_samples': 2, 'val_dataloader.batch_size': 2,
                 'val_dataloader.dataset.num_points': (200, 300), 'model.backbone.channels': (16, 64, 64, 128),
                 'model.backbone.blocks': (1, 1, 2, 1), 'model.backbone.conv_defaults.kernel_size': 5,
                 'model.head_channels': (16,)}),
}


@pytest.fixture(scope='session')
def families():
    """name -> (config path, cfg_options) of the tiny family configs."""
    return {k: (str(REPO / path), dict(opts)) for k, (path, opts) in FAMILIES.items()}


@pytest.fixture(scope='session')
def prepared(families):
    """``prepared(name)`` -> :class:`fsdlite.slim.api.Prepared` of a tiny family config (cached per session)."""
    import torch

    from fsdlite.slim.api import prepare
    cache = {}

    def get(name):
        if name not in cache:
            torch.manual_seed(0)
            path, opts = families[name]
            cache[name] = prepare(path, None, opts)
        return cache[name]
    return get


class Wrap(nn.Module):
    """BaseModel-like wrapper of a plain module: ``forward(inputs, data_samples, mode) -> body(inputs)``."""

    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, inputs, data_samples=None, mode='tensor'):
        return self.body(inputs)


@pytest.fixture
def slim_kit():
    """Helpers that tests share (importlib mode forbids importing conftest)."""
    from fsdlite.slim.api import max_abs_diff
    from fsdlite.slim.engine import SlimRequest
    return types.SimpleNamespace(Request=SlimRequest, max_abs_diff=max_abs_diff, repo=REPO, Wrap=Wrap)
