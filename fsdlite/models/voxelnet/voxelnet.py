"""VoxelNet: per-voxel material prediction from muon scatterings (X0Net / GravNet lineage).

    muon_features (B, V, M, F) -> input standardisation
      -> muon stage: per (volume, voxel) a GravNet over its M muons + attention collapse -> (B, V, D)
      -> voxel stage: per target voxel a GravNet over all V voxels ([features_j, p_j - p_i, |p_j - p_i|])
         + attention collapse -> (B, V, D)
      -> head: attention across voxels + linear -> (B, V, classes) log-probabilities (or log X0)

``impl='dense'`` is the faithful O(V M²) / O(V³) formulation; ``impl='efficient'`` runs the same
weights with kNN + fused aggregation + SDPA, over chunks of ``chunk_rows`` graph nodes with
recomputation in backward (``recompute=True``), so activation memory is bounded by one chunk.
"""
import torch
from mmengine.model import BaseModel

from ...registry import MODELS
from ...structures import PointData
from ...structures.bounds import is_exporting
from .chunking import graphs_per_chunk, map_chunks
from .impl import check_impl


@MODELS.register_module()
class VoxelNet(BaseModel):
    """Muon-tomography graph network.

    Args:
        muon_stage (dict): :class:`~.stage.GraphStage` over the muons of each voxel.
        voxel_stage (dict): :class:`~.stage.GraphStage` over voxels (its GravNet takes D + 4 features).
        head (dict): :class:`~.heads.VoxelClassHead` or :class:`~.heads.VoxelX0Head` config.
        input_norm (dict): :class:`~.norm.FeatureStandardizer` for the muon features.
        voxel_norm (dict): :class:`~.norm.FeatureStandardizer` options for the muon-stage output (its
            ``num_features`` is set to the muon-stage width).
        impl (str): 'dense' or 'efficient'.
        chunk_rows (int): efficient impl: graph nodes (voxels x muons) per chunk.
        recompute (bool): efficient impl: checkpoint each chunk (recompute activations in backward).
        position_scale (float): voxel positions (m) are multiplied by this (e.g. 1 / voxel size).
        data_preprocessor (dict): defaults to :class:`~.data_preprocessor.VoxelNetDataPreprocessor`.
    """

    def __init__(self, muon_stage, voxel_stage, head, input_norm, impl='efficient', chunk_rows=1 << 14,
                 recompute=True, position_scale=1.0, data_preprocessor=None, voxel_norm=None, init_cfg=None):
        # built in fsdlite's scope (BaseModel would look the type up in mmengine's root registry)
        preprocessor = MODELS.build(dict(data_preprocessor or dict(type='VoxelNetDataPreprocessor')))
        super().__init__(data_preprocessor=preprocessor, init_cfg=init_cfg)
        self.impl = check_impl('VoxelNet', impl)
        self.chunk_rows = int(chunk_rows)
        self.recompute = bool(recompute)
        self.position_scale = float(position_scale)
        self.input_norm = MODELS.build(dict(input_norm))
        self.muon_stage = MODELS.build(dict(muon_stage))
        width = self.muon_stage.out_channels
        self.voxel_norm = MODELS.build(dict(dict(type='FeatureStandardizer'), **(voxel_norm or {}), num_features=width))
        self.voxel_stage = MODELS.build(dict(voxel_stage))
        if self.voxel_stage.in_channels != width + 4:
            raise ValueError(f'VoxelNet: voxel_stage.gravnet.in_channels must be muon-stage width + 4 = {width + 4}, '
                             f'got {self.voxel_stage.in_channels}')
        head = dict(head)
        head.setdefault('in_channels', self.voxel_stage.out_channels)
        self.head = MODELS.build(head)

    # ------------------------------------------------------------------------------ validation
    def _check_inputs(self, muon_features, voxel_centres):
        if not isinstance(muon_features, torch.Tensor) or muon_features.dim() != 4:
            shape = tuple(muon_features.shape) if isinstance(muon_features, torch.Tensor) else type(muon_features)
            raise ValueError(f'VoxelNet: muon_features must be a (B, V, M, F) tensor, got {shape}')
        b, v, m, f = muon_features.shape
        if f != self.input_norm.num_features:
            raise ValueError(f'VoxelNet: muon_features has F={f} features, the config expects '
                             f'{self.input_norm.num_features}')
        if v == 0 or m == 0:
            raise ValueError(f'VoxelNet: every voxel needs at least one muon and a volume at least one voxel; '
                             f'got V={v} voxels and M={m} muons (shape {tuple(muon_features.shape)})')
        if tuple(voxel_centres.shape) != (b, v, 3):
            raise ValueError(f'VoxelNet: voxel_centres must have shape ({b}, {v}, 3) to match muon_features, got '
                             f'{tuple(voxel_centres.shape)}')
        if is_exporting():  # value checks read data: eager only (deploy runtimes check inputs before the graph)
            return
        for name, t in (('muon_features', muon_features), ('voxel_centres', voxel_centres)):
            bad = ~torch.isfinite(t)
            if bad.any():
                first = [int(i) for i in bad.nonzero()[0]]
                raise ValueError(f'VoxelNet: {name} contains {int(bad.sum())} non-finite values (NaN/Inf), first at '
                                 f'index {first}; drop or repair those muons before the model')

    # ------------------------------------------------------------------------------ stages
    def _muon_chunk(self, x, scale, shift):
        return self.muon_stage(self.input_norm.standardize(x, scale, shift), self.impl)

    def _voxel_chunk(self, targets, features, positions):
        """Voxel-stage output for the flattened (volume, voxel) targets in ``targets`` (a range)."""
        v = features.shape[1]
        t = torch.arange(targets.start, targets.stop, device=features.device)
        vol, vox = t // v, t % v
        rel = positions[vol] - positions[vol, vox].unsqueeze(1)                   # (T, V, 3)
        pairs = torch.cat([features[vol], rel, rel.norm(dim=2, keepdim=True)], 2)
        return self.voxel_stage(pairs, self.impl)

    def extract_feat(self, muon_features, voxel_centres):
        """Voxel representations (B, V, D) after the muon and voxel stages."""
        self._check_inputs(muon_features, voxel_centres)
        b, v, m, f = muon_features.shape
        scale, shift = self.input_norm.params(muon_features)
        rows = muon_features.reshape(b * v, m, f)
        dense = self.impl == 'dense'
        step = b * v if dense else graphs_per_chunk(self.chunk_rows, m)
        recompute = self.recompute and not dense
        voxel = map_chunks(self._muon_chunk, rows.split(step), scale, shift, recompute=recompute)
        voxel = self.voxel_norm(voxel).view(b, v, -1)
        positions = voxel_centres.to(voxel.dtype) * self.position_scale
        step = b * v if dense else graphs_per_chunk(self.chunk_rows, v)
        targets = [range(s, min(s + step, b * v)) for s in range(0, b * v, step)]
        out = map_chunks(self._voxel_chunk, targets, voxel, positions, recompute=recompute)
        return out.view(b, v, -1)

    # ------------------------------------------------------------------------------ BaseModel API
    def forward(self, inputs, data_samples=None, mode='tensor'):
        """mmengine contract.

        Args:
            inputs (dict): ``muon_features`` (B, V, M, F), ``voxel_centres`` (B, V, 3).
            data_samples (list[Det3DDataSample]): with ``gt_pts_seg`` (``pts_semantic_mask``, ``x0``,
                ``block_mask``, each (V,)) for 'loss'.
            mode (str): 'tensor' -> head output (B, V, C) (or (B, V)); 'loss' -> dict of losses;
                'predict' -> data samples with ``pred_pts_seg``.
        """
        output = self.head(self.extract_feat(inputs['muon_features'], inputs['voxel_centres']), self.impl)
        if mode == 'tensor':
            return output
        if mode == 'loss':
            return self.head.loss(output, self._targets(data_samples, output.shape[:2]))
        if mode == 'predict':
            for sample, pred in zip(data_samples, self.head.predict(output.detach())):
                sample.pred_pts_seg = PointData(**pred)
            return data_samples
        raise ValueError(f"VoxelNet: mode must be 'tensor', 'loss' or 'predict', got {mode!r}")

    @staticmethod
    def _targets(data_samples, shape):
        b, v = shape
        if data_samples is None or len(data_samples) != b:
            raise ValueError(f'VoxelNet: loss needs one data sample per volume ({b}), got '
                             f'{None if data_samples is None else len(data_samples)}')
        fields = dict(labels='pts_semantic_mask', x0='x0', block_mask='block_mask')
        out = {}
        for key, name in fields.items():
            values = [getattr(s.gt_pts_seg, name) for s in data_samples]
            for i, t in enumerate(values):
                if t.shape != (v,):
                    raise ValueError(f'VoxelNet: data_samples[{i}].gt_pts_seg.{name} has shape {tuple(t.shape)} but '
                                     f'the input has V={v} voxels; targets and inputs must describe the same volume')
            out[key] = torch.stack(values)
        return out
