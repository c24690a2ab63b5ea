"""fsdlite.datasets.sim.statistics on hand-made frames (the real-against-simulated comparison: test_realism.py)."""
import numpy as np

from fsdlite.datasets.sim.statistics import YAW_QUANTILES, format_statistics, scan_statistics


def test_car_yaw_is_folded_against_the_sensor_heading():
    """A box and its 180-degree turn are one orientation: yaws 0, pi, -10 deg, 100 deg, 190 deg fold to 0, 0, 10,
    80 and 10 degrees."""
    yaws = np.radians([0.0, 180.0, -10.0, 100.0, 190.0])
    boxes = np.array([[10.0 + 5 * i, 0.0, -1.5, 4.0, 1.6, 1.5, yaw] for i, yaw in enumerate(yaws)], np.float32)
    points = np.array([[10.0, 0.0, -1.0, 0.2], [30.0, 5.0, 0.5, 0.0]], np.float32)
    stats = scan_statistics([(points, boxes), (points, np.zeros((0, 7), np.float32))])
    np.testing.assert_allclose(stats['car_yaw_quantiles'], np.percentile([0, 0, 10, 80, 10], YAW_QUANTILES),
                               atol=1e-3)
    assert 'car |yaw| deg q50/75/90' in format_statistics([('hand-made', stats)])
    assert np.isnan(scan_statistics([(points, np.zeros((0, 7), np.float32))])['car_yaw_quantiles']).all()
