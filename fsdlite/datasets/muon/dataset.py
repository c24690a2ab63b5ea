"""Registered dataset of simulated random-block muon-tomography volumes."""
import math

import torch
from torch.utils.data import Dataset

from ...registry import DATASETS
from ...structures import Det3DDataSample, PointData
from fsdlite.utils.drop_report import report_dropped
from .features import FEATURE_NAMES, poca_log_scatter, voxel_muon_features
from .materials import DEFAULT_CLASSES, radiation_lengths
from .simulator import MuonSimulator
from .volume import VoxelGrid, random_block_volume


@DATASETS.register_module()
class MuonVolumeDataset(Dataset):
    """Volumes of one material block in a background, each with M reconstructed muons.

    Item ``i`` is simulated on access from the seed ``(seed, i)``, so the dataset is deterministic
    and needs no storage.  Exactly ``num_muons`` usable muons are kept per volume: muons are simulated
    in rounds until enough survive; the surplus of the last round, undetected muons and muons whose
    PoCA is outside the volume are counted in the sample's ``metainfo['muon_counts']`` and reported (a warning
    the first time, totals in :attr:`dropped_totals`).

    Args:
        num_volumes (int): dataset length.
        grid_shape (tuple): (nx, ny, nz) voxels; V = nx * ny * nz.
        voxel_size (float): voxel edge (m).
        num_muons (int): M, muons per volume.
        classes (tuple[str]): material classes (names from :mod:`.materials`).
        block_size (tuple): (min, max) block edge in voxels (max None: grid size - 1).
        simulator (dict): keyword arguments of :class:`MuonSimulator`.
        seed (int): base seed (use different seeds for training and held-out sets).
        muons_per_voxel (int, optional): K; each voxel's input holds only the K muons whose PoCA is nearest
            to its centre (None: all M).  The baseline and the kept-muon counts still use all M muons.
    Items:
        dict(inputs=dict(muon_features (V, M, 9) (or (V, K, 9)) float32, voxel_centres (V, 3) float32),
        data_samples=Det3DDataSample) with ``gt_pts_seg.pts_semantic_mask`` (V,) int64 class,
        ``gt_pts_seg.x0`` (V,) float32 metres, ``gt_pts_seg.block_mask`` (V,) bool,
        ``gt_pts_seg.baseline_score`` (V,) float32 (NaN where no PoCA), ``gt_pts_seg.baseline_count`` (V,).
    """

    METAINFO = dict(classes=DEFAULT_CLASSES, feature_names=FEATURE_NAMES)

    def __init__(self, num_volumes, grid_shape=(5, 5, 3), voxel_size=0.2, num_muons=250, classes=DEFAULT_CLASSES,
                 block_size=(1, None), simulator=None, seed=0, muons_per_voxel=None):
        if num_volumes < 0:
            raise ValueError(f'MuonVolumeDataset: num_volumes must be >= 0, got {num_volumes}')
        if num_muons < 1:
            raise ValueError(f'MuonVolumeDataset: num_muons must be >= 1, got {num_muons}')
        if muons_per_voxel is not None and not 1 <= muons_per_voxel <= num_muons:
            raise ValueError(f'MuonVolumeDataset: muons_per_voxel must be in [1, num_muons={num_muons}] or None, '
                             f'got {muons_per_voxel}')
        self.muons_per_voxel = None if muons_per_voxel is None else int(muons_per_voxel)
        self.num_volumes = int(num_volumes)
        self.grid = VoxelGrid(grid_shape, voxel_size)
        self.num_muons = int(num_muons)
        self.classes = tuple(classes)
        self.class_x0 = radiation_lengths(self.classes)
        self.block_size = tuple(block_size)
        self.simulator = MuonSimulator(self.grid, **(simulator or {}))
        self.seed = int(seed)
        self.metainfo = dict(classes=self.classes, feature_names=FEATURE_NAMES, grid_shape=self.grid.shape,
                             voxel_size=self.grid.voxel_size)

    def __len__(self):
        return self.num_volumes

    def _generator(self, index):
        return torch.Generator().manual_seed(self.seed * 1_000_003 + index)

    def simulate_volume(self, index):
        """Labels, block mask, X0 and kept muons of volume ``index`` (plus muon bookkeeping counts)."""
        gen = self._generator(index)
        labels, block = random_block_volume(self.grid, len(self.classes), gen, self.block_size)
        x0 = self.class_x0[labels]
        parts, totals = [], dict(generated=0, undetected=0, poca_outside=0, kept=0)
        needed = self.num_muons
        while needed > 0:
            batch = max(64, math.ceil(needed * 1.3 * (totals['generated'] + 1) / (totals['kept'] + 1)))
            muons, counts = self.simulator.simulate(x0, batch, gen)
            parts.append(muons)
            for key in totals:
                totals[key] += counts[key]
            needed = self.num_muons - totals['kept']
            if totals['generated'] > 1000 * self.num_muons:
                raise RuntimeError(f'MuonVolumeDataset: only {totals["kept"]} of {totals["generated"]} muons '
                                   f'were usable; check the detector/grid settings')
        muons = {k: torch.cat([p[k] for p in parts])[:self.num_muons] for k in parts[0]}
        totals['surplus'] = totals['kept'] - self.num_muons
        return labels, block, x0, muons, totals

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f'MuonVolumeDataset: index {index} out of range for {len(self)} volumes')
        labels, block, x0, muons, counts = self.simulate_volume(index)
        report_dropped(self, 'muon_counts', counts['undetected'] + counts['poca_outside'] + counts['surplus'],
                       lambda: f"volume {index} kept {self.num_muons} of {counts['generated']} simulated muons "
                               f"({counts['undetected']} undetected, {counts['poca_outside']} with the PoCA outside "
                               f"the volume, {counts['surplus']} surplus of the last round)")
        centres = self.grid.centres()
        score, count = poca_log_scatter(muons, self.grid)
        sample = Det3DDataSample(metainfo=dict(
            sample_idx=index, num_classes=len(self.classes), classes=self.classes, grid_shape=self.grid.shape,
            voxel_size=self.grid.voxel_size, muon_counts=counts, num_parallel_tracks=int(muons['parallel'].sum())))
        sample.gt_pts_seg = PointData(pts_semantic_mask=labels, x0=x0.float(), block_mask=block,
                                      baseline_score=score, baseline_count=count)
        inputs = dict(muon_features=voxel_muon_features(muons, centres, self.muons_per_voxel),
                      voxel_centres=centres.float())
        return dict(inputs=inputs, data_samples=sample)
