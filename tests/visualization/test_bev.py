"""BEV PNG: panels, colours of classes and boxes, bad inputs."""
import numpy as np
import pytest
import torch
from matplotlib.image import imread

from fsdlite.visualization.bev import CLASS_COLORS, GT_BOX_COLOR, PRED_BOX_COLOR, class_colors, draw_bev


def _has_colour(img, rgb, tol=0.06):
    return bool((np.abs(img[..., :3] - np.array(rgb)) < tol).all(-1).any())


def test_class_colours():
    colours = class_colors(torch.tensor([0, 1, 3, 7, -1]), 3)
    assert np.allclose(colours[0], CLASS_COLORS[0]) and np.allclose(colours[1], CLASS_COLORS[1])
    assert np.allclose(colours[2], colours[3]) and np.allclose(colours[2], colours[4])  # background grey


def test_draws_points_and_boxes(tmp_path):
    g = torch.Generator().manual_seed(0)
    points = torch.rand(2000, 4, generator=g) * torch.tensor([20.0, 20.0, 2.0, 1.0]) - torch.tensor([0, 10, 1, 0])
    labels = torch.where(points[:, 0] < 5, 0, 3)
    boxes = torch.tensor([[10.0, 0.0, -1.0, 4.0, 2.0, 1.5, 0.5]])
    out = draw_bev(tmp_path / 'sub' / 'bev.png', points, ('Car', 'Pedestrian', 'Cyclist'), gt_labels=labels,
                   pred_labels=labels, pred_scores=torch.rand(2000, 3, generator=g), gt_boxes=boxes,
                   gt_box_labels=torch.tensor([0]), pred_boxes=boxes + 0.5, pred_box_scores=torch.tensor([0.9]),
                   point_range=(0, -10, -1, 20, 10, 1), title='test')
    img = imread(out)
    assert img.shape[1] > 2.0 * img.shape[0]  # three panels side by side
    assert _has_colour(img, GT_BOX_COLOR) and _has_colour(img, PRED_BOX_COLOR)
    assert _has_colour(img, CLASS_COLORS[0])
    single = imread(draw_bev(tmp_path / 'plain.png', points, ('Car',)))
    assert single.shape[1] < 1.6 * single.shape[0]
    assert not _has_colour(single, GT_BOX_COLOR)


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match=r'points must have shape \(N, >=2\)'):
        draw_bev(tmp_path / 'x.png', torch.zeros(5), ('Car',))
    with pytest.raises(ValueError, match='pred_labels has 3 rows for 5 points'):
        draw_bev(tmp_path / 'x.png', torch.zeros(5, 3), ('Car',), pred_labels=torch.zeros(3, dtype=torch.long))
