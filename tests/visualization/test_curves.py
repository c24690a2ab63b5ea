"""Training-curve PNGs: losses and validation metrics against the iteration."""
import math

import matplotlib.image as mpimg

from fsdlite.visualization.curves import draw_training_curves


def test_curves_png(tmp_path):
    train = [dict(step=s, loss=1.0 / s, loss_cls=0.5 / s) for s in range(10, 110, 10)]
    val = [dict(step=50, **{'det/Car_BEV_AP@0.5': 0.2}), dict(step=100, **{'det/Car_BEV_AP@0.5': math.nan})]
    path = draw_training_curves(tmp_path / 'c.png', train, val, ['det/Car_BEV_AP@0.5', 'det/missing'], title='t')
    image = mpimg.imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 800
    empty = draw_training_curves(tmp_path / 'e.png', [], [], ['det/Car_BEV_AP@0.5'])  # nothing logged yet
    assert empty.is_file()
