"""Fixtures of the deploy tests: the real configs of each family at tiny widths (``--cfg-options``), real frames."""
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: config per test model and the overrides that make it tiny (keys exist in the configs; values as --cfg-options)
CONFIGS = {
    'fsd': 'configs/fsd/fsdlite_kitti.py',
    'fsdv2': 'configs/fsdv2/fsdv2lite_kitti.py',
    'voxelnet': 'configs/voxelnet/voxelnet_random_blocks.py',
    'kpfcnn': 'configs/kpconv/kpfcnn_kpconv_scenes.py',
    'kpcnn': 'configs/kpconv/kpcnn_kpinv_shapes.py',  # classification with point involution
}
_SEG = {'model.voxel_encoder.feat_channels': (8, 8), 'model.backbone.base_channels': 8,
        'model.backbone.encoder_channels': ((8,), (8,), (8,)),
        'model.backbone.decoder_channels': ((8, 8, 8), (8, 8, 8), (8, 8, 8)),
        'model.seg_head.hidden_channels': (8,), 'model.bbox_head.shared_channels': (16,),
        'model.bbox_head.test_cfg.score_thr': 0.0}  # random weights: keep every box so NMS has work to do
OPTIONS = {
    'fsd': dict(_SEG, **{'model.sir.block_channels': ((8, 8), (8, 8), (8, 8))}),
    'fsdv2': dict(_SEG, **{'model.virtual_encoder.out_channels': 8, 'model.virtual_vfe.feat_channels': (8, 8),
                           'model.mixer.base_channels': 8, 'model.mixer.encoder_channels': ((8,), (8,), (8,)),
                           'model.mixer.decoder_channels': ((8, 8, 8), (8, 8, 8), (8, 8, 8))}),
    'voxelnet': {'test_dataloader.dataset.num_muons': 24, 'test_dataloader.dataset.muons_per_voxel': 24,
                 'test_dataloader.dataset.num_volumes': 4,
                 'test_dataloader.dataset.grid_shape': (3, 3, 2), 'model.muon_stage.gravnet.k': 6,
                 'model.voxel_stage.gravnet.k': 4, 'model.muon_stage.gravnet.hidden_channels': (16, 16),
                 'model.voxel_stage.gravnet.hidden_channels': (16, 16)},
    'kpfcnn': {'model.backbone.channels': (8, 16, 16, 16), 'model.backbone.blocks': (1, 1, 1, 1),
               'model.head_channels': (8,), 'test_dataloader.dataset.extent': 0.8,
               'test_dataloader.dataset.point_density': 200.0},
    # KPInv needs >= 2 generated weights per kernel point at every width (channels_per_group 8)
    'kpcnn': {'model.backbone.channels': (64, 64, 64, 64), 'model.backbone.blocks': (1, 1, 1, 1),
              'model.head_channels': (8,), 'test_dataloader.dataset.num_points': (256, 512)},
}


def cli_options(name):
    """``--cfg-options`` arguments of :data:`OPTIONS` for a subprocess."""
    return [f'{k}={v!r}'.replace(' ', '') for k, v in OPTIONS[name].items()]


class TinyModels:
    """Config paths and tiny overrides (pytest's importlib mode forbids importing conftest)."""

    repo = REPO
    configs = {k: str(REPO / v) for k, v in CONFIGS.items()}
    options = OPTIONS
    cli_options = staticmethod(cli_options)


@pytest.fixture(scope='session')
def tiny():
    """:class:`TinyModels`."""
    return TinyModels


@pytest.fixture(scope='session')
def kitti_frame(shared_data):
    """The KITTI 000008 cloud as a one-sample verification :class:`~fsdlite.deploy.adapter.Frame`."""
    from fsdlite.deploy.adapter import Frame
    from fsdlite.deploy.frames import LIDAR_FRAMES, load_lidar_frame
    return Frame('kitti', [load_lidar_frame('kitti', 4, shared_data)], LIDAR_FRAMES['kitti'][2])
