"""Data structures: 7-dof lidar boxes, data samples, padded/bounded tensors."""
from .boxes import BOX_DIM, bottom_to_gravity, gravity_to_bottom, limit_period
from .data_sample import Det3DDataSample, InstanceData, PointData

__all__ = ['BOX_DIM', 'bottom_to_gravity', 'gravity_to_bottom', 'limit_period', 'Det3DDataSample',
           'InstanceData', 'PointData']
