"""tools/collect_bounds.py on synthetic frames: the printed bounds are the measured maxima (times the margin), a
static model built with them reproduces the dynamic model's boxes on those frames, one less raises; bad
arguments exit with a clear message."""
import math

import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import pseudo_collate

from fsdlite.deploy.bound_measure import measure_bounds
from fsdlite.deploy.fixed_shape import FixedShapeDetector
from fsdlite.registry import DATASETS, MODELS
from fsdlite.structures.bounds import BoundExceededError

CONFIG = 'configs/fsd/fsdlite_synthetic.py'
SMALL = ['val_dataloader.dataset.num_frames=2', 'model.fg_sampler.max_per_class=[300,100,100]',
         'model.bbox_head.test_cfg.score_thr=0.0']


def _model(cfg, bounds=None):
    torch.manual_seed(0)  # the tool's random weights
    model = MODELS.build(dict(cfg.model.to_dict(), bounds=bounds)).eval().double()
    return model if bounds is None else FixedShapeDetector(model)


def test_collect_bounds_measures_and_bounds_reproduce_dynamic(tools, capsys):
    tool = tools.load('collect_bounds')
    bounds = tool.main([CONFIG, '--num-frames', '2', '--margin', '1.0', '--cfg-options', *SMALL])
    out = capsys.readouterr().out
    assert 'RANDOM weights' in out and f'bounds = dict(max_points={bounds["max_points"]}' in out
    assert sorted(bounds) == ['max_boxes', 'max_cc_iters', 'max_clusters', 'max_fg_points', 'max_pairs', 'max_points',
                              'max_refiner_pairs', 'max_voxels']
    assert bounds['max_refiner_pairs'] > 1  # score_thr 0: boxes are selected, the refiner packs their pairs
    assert len(bounds['max_pairs']) == 5 and min(bounds['max_pairs']) > 0
    assert len(bounds['max_voxels']) == 3 and all(v <= b for v, b in zip(bounds['max_fg_points'], [300, 100, 100]))
    cfg = Config.fromfile(str(tools.repo / CONFIG))
    cfg.val_dataloader.dataset.num_frames = 2
    cfg.model.fg_sampler.max_per_class = [300, 100, 100]
    cfg.model.bbox_head.test_cfg.score_thr = 0.0
    dataset = DATASETS.build(cfg.val_dataloader.dataset)
    dynamic, static = _model(cfg), _model(cfg, bounds)
    static.detector.load_state_dict(dynamic.state_dict())
    worst = {}
    for i in range(2):
        inputs = dynamic.data_preprocessor(pseudo_collate([dataset[i]]), False)['inputs']
        inputs['points'] = inputs['points'].double()
        needed = measure_bounds(dynamic, inputs)
        worst = {k: v if k not in worst else (max(worst[k], v) if not isinstance(v, list) else
                                            [max(a, b) for a, b in zip(worst[k], v)]) for k, v in needed.items()}
        with torch.no_grad():
            a = dynamic(inputs, mode='predict')[0].pred_instances_3d
            b = static(inputs, mode='predict')[0].pred_instances_3d
        assert a.bboxes_3d.shape == b.bboxes_3d.shape and a.bboxes_3d.shape[0] > 0
        torch.testing.assert_close(b.bboxes_3d, a.bboxes_3d, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(b.scores_3d, a.scores_3d, rtol=1e-9, atol=1e-12)
    assert {k: v if isinstance(v, list) else max(v, 1) for k, v in worst.items()} == bounds  # margin 1.0
    frame = max(range(2), key=lambda i: len(dataset[i]['inputs']['points']))  # the frame with most points
    tight = dict(bounds, max_points=bounds['max_points'] - 1)
    low = _model(cfg, tight)
    with pytest.raises(BoundExceededError, match=f'max_points exceeded: needed {bounds["max_points"]}'):
        with torch.no_grad():
            inputs = low.data_preprocessor(pseudo_collate([dataset[frame]]), False)['inputs']
            low(dict(inputs, points=inputs['points'].double()), mode='predict')


def test_collect_bounds_margin_and_errors(tools, capsys, tmp_path):
    tool = tools.load('collect_bounds')
    out_file = tmp_path / 'bounds.py'
    bounds = tool.main([CONFIG, '--num-frames', '1', '--margin', '1.5', '--out', str(out_file), '--cfg-options',
                        *SMALL])
    text = out_file.read_text()
    assert 'margin 1.5' in text and Config.fromstring(text, '.py').bounds.to_dict() == bounds
    # one frame at margin 1.5 needs ~1/1.5 of every pre-op bound: a tier of 0.7 holds it
    assert '# capacity tiers for deploy/export_onnx.py: --tiers 0.7\n' in text
    printed = capsys.readouterr().out
    assert 'as a fraction of these bounds (its capacity tier): min 0.67' in printed
    row = next(line for line in printed.splitlines() if line.startswith('max_points'))
    assert bounds['max_points'] == math.ceil(int(row.split()[1]) * 1.5)
    with pytest.raises(SystemExit) as exc:
        tool.main([CONFIG, '--margin', '0.5'])
    assert exc.value.code == 2 and "argument --margin: expected a number >= 1, got '0.5'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        tool.main(['configs/segmentation/sparse_segmentor_synthetic.py', '--num-frames', '1'])
    assert exc.value.code == 2 and 'expected FSDLite or FSDv2Lite' in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        tool.main([CONFIG, '--checkpoint', str(tmp_path / 'missing.pth'), '--num-frames', '1'])
    assert exc.value.code == 2 and 'missing.pth' in capsys.readouterr().err


def test_tier_fractions_and_suggested_tiers(tools):
    tool = tools.load('collect_bounds')
    bounds = dict(max_points=100, max_voxels=[50, 20], max_pairs=[10], max_boxes=5)
    history = [dict(max_points=30, max_voxels=[10, 12], max_pairs=[2], max_boxes=5),   # level 1 decides: 0.6
               dict(max_points=80, max_voxels=[10, 2], max_pairs=[2], max_boxes=1),    # points: 0.8
               dict(max_points=10, max_voxels=[5, 2], max_pairs=[9], max_boxes=0)]     # pairs: 0.9 (boxes ignored)
    fractions = tool.tier_fractions(history, bounds, ('max_points', 'max_voxels', 'max_pairs'))
    assert fractions == pytest.approx([0.6, 0.8, 0.9])
    assert tool.suggest_tiers(fractions) == [0.8, 0.9]  # median and 90th percentile
    assert tool.suggest_tiers([0.61, 0.62]) == [0.65]
    assert tool.suggest_tiers([0.97, 1.0]) == []  # nothing below 1 would help
