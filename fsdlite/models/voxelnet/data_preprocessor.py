"""Collate VoxelNet volumes into batched tensors."""
import torch
from mmengine.model import BaseDataPreprocessor

from ...registry import MODELS


@MODELS.register_module()
class VoxelNetDataPreprocessor(BaseDataPreprocessor):
    """Stack per-volume ``muon_features`` (V, M, F) and ``voxel_centres`` (V, 3) into batch tensors.

    All volumes of a batch must share V and M (the dataset keeps exactly M muons per volume).

    Returns:
        dict(inputs=dict(muon_features (B, V, M, F), voxel_centres (B, V, 3)), data_samples=list).
    """

    def forward(self, data, training=False):
        """Stack the volumes (a single unbatched tensor gains a batch dim of 1); see the class docstring.

        Raises:
            ValueError: volumes of the batch differ in shape.
        """
        data = self.cast_data(data)
        inputs = data['inputs']
        out = {}
        for key in ('muon_features', 'voxel_centres'):
            items = inputs[key]
            if isinstance(items, torch.Tensor):
                out[key] = items if items.dim() == (4 if key == 'muon_features' else 3) else items.unsqueeze(0)
                continue
            shapes = {tuple(t.shape) for t in items}
            if len(shapes) != 1:
                raise ValueError(f'VoxelNetDataPreprocessor: every volume of a batch needs the same {key} shape, '
                                 f'got {sorted(shapes)}')
            out[key] = torch.stack(list(items))
        return dict(inputs=out, data_samples=data.get('data_samples'))
