"""A simulated KITTI world: urban streets ray-cast by an HDL-64E model, labelled as KITTI labels real frames.

``sensor`` (beam layout, ray grid, measurement model), ``geometry`` (vectorised ray casting against convex
polyhedra and ellipsoids, material behaviour), ``shapes`` (cars, vans, trucks, trams, pedestrians, cyclists),
``streetscape`` (road, sidewalks, buildings, vegetation, furniture), ``traffic`` (road users' placement) and
``render`` (one frame: points, masks and KITTI-style labels).
"""
from .render import WorldSpec, render_frame
from .sensor import LidarSpec, SensorNoise

__all__ = ['WorldSpec', 'render_frame', 'LidarSpec', 'SensorNoise']
