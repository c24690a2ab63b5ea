"""The fixed-shape run of FSD-lite / FSDv2-lite (fsdlite.deploy.fixed_shape) against their dynamic mode with the same random weights (float64, low
thresholds so that many boxes come out): the KITTI frame (open-mmlab/mmdetection3d@fe25f7a:demo/data/kitti/
000008.bin), the nuScenes keyframe (same commit, demo/data/nuscenes/...LIDAR_TOP...pcd.bin, cropped) and
synthetic scenes give the same boxes and scores; every bound raises with its name, needed and allowed size;
exporting truncates and reports; the fixed-shape forward uses no data-dependent op and the same op sequence
for any batch (no loop over samples)."""
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fsdlite.deploy.bound_measure import measure_bounds
from fsdlite.deploy.detector import DetectorGraph
from fsdlite.deploy.fixed_shape import FixedShapeDetector, fixed_inputs, predict_fixed_shape
from fsdlite.registry import MODELS
from fsdlite.structures.bounds import BoundExceededError, merge_max, scale_bounds

KITTI_RANGE = [0.0, -40.0, -3.0, 70.4, 40.0, 1.0]
NUSCENES_RANGE = [-24.0, -24.0, -4.0, 24.0, 24.0, 2.0]
TALL_CELLS = ((0.3, 0.3, 6.0), (0.1, 0.1, 6.0), (0.2, 0.2, 6.0))


# FSD-lite with a box refiner that sees at most 16 points per box and refines at most 3 boxes (both caps bind: the
# fixed run must pick the same points and the same boxes)
REFINER = dict(type='BoxRefiner', sir=dict(block_channels=((16, 16),), rel_channels=(8,)), shared_channels=(16,),
               max_points=16, max_boxes=3)


def model_cfg(kit, name, point_range):
    cfg = getattr(kit, f'{name.replace("_refined", "")}_config')()
    cfg['point_range'] = list(point_range)
    if name.startswith('fsd') and not name.startswith('fsdv2'):
        cfg['cluster_assigner']['cluster_voxel_size'] = TALL_CELLS  # one z layer (the configs' choice)
    if name.endswith('_refined'):
        cfg['refiner'] = REFINER
    return cfg


def dynamic_model(kit, name, point_range, seed=0):
    """Random weights and random BatchNorm statistics, float64, eval."""
    torch.manual_seed(seed)
    model = kit.randomize_bn(MODELS.build(model_cfg(kit, name, point_range)), seed)
    if model.refiner is not None:  # it starts as the identity: give it residuals to compare
        torch.nn.init.normal_(model.refiner.reg.weight, std=0.1)
    return model.double().eval()


def static_twin(kit, name, point_range, dynamic, bounds):
    """The same weights with ``bounds``, wrapped so that 'predict' / 'tensor' run the fixed-shape run."""
    model = MODELS.build(dict(model_cfg(kit, name, point_range), bounds=bounds)).double().eval()
    model.load_state_dict(dynamic.state_dict(), strict=True)
    return FixedShapeDetector(model)


def preprocess(model, clouds):
    inputs = model.data_preprocessor(dict(inputs=dict(points=clouds)), False)['inputs']
    return dict(inputs, points=inputs['points'].double())


def kitti_cloud(shared_data):
    path = shared_data / 'kitti_object_000008' / '000008.bin'
    return [torch.from_numpy(np.fromfile(path, np.float32).reshape(-1, 4))]


def nuscenes_cloud(shared_data):
    path = shared_data / 'nuscenes_demo' / 'LIDAR_TOP_1532402927647951.pcd.bin'
    points = torch.from_numpy(np.fromfile(path, np.float32).reshape(-1, 5))[:, :4]
    return [points]


def synthetic_clouds(kit):
    return [kit.make_scene(5)['inputs']['points'], kit.make_scene(6, num_objects=2)['inputs']['points']]


def assert_same(dynamic, static, inputs):
    with torch.no_grad():
        raw_d, raw_s = dynamic(inputs, mode='tensor'), static(inputs, mode='tensor')
        pred_d, pred_s = dynamic(inputs, mode='predict'), static(inputs, mode='predict')
    p, k = raw_d['seg_logits'].shape[0], raw_d['cls_logits'].shape[0]
    assert int(raw_s['num_instances']) == k > 0
    torch.testing.assert_close(raw_s['seg_logits'][:p], raw_d['seg_logits'], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(raw_s['cls_logits'][:k], raw_d['cls_logits'], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(raw_s['box_codes'][:k], raw_d['box_codes'], rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(raw_s['instance_xyz'][:k], raw_d['instance_xyz'], rtol=1e-9, atol=1e-9)
    assert torch.equal(raw_s['instance_batch'][:k], raw_d['instance_batch'])
    if raw_d['instance_labels'] is not None:
        assert torch.equal(raw_s['instance_labels'][:k], raw_d['instance_labels'])
    assert raw_s['dropped'].tolist() == [0] * len(static.detector.dropped_names('graph'))
    total = 0
    for a, b in zip(pred_d, pred_s):
        a, b = a.pred_instances_3d, b.pred_instances_3d
        assert a.bboxes_3d.shape == b.bboxes_3d.shape
        torch.testing.assert_close(b.bboxes_3d, a.bboxes_3d, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(b.scores_3d, a.scores_3d, rtol=1e-9, atol=1e-12)
        assert torch.equal(b.labels_3d, a.labels_3d)
        total += a.bboxes_3d.shape[0]
    assert total > 0
    return raw_s


@pytest.mark.parametrize('name', ['fsd', 'fsdv2', 'fsd_refined'])
@pytest.mark.parametrize('frame', ['kitti', 'nuscenes', 'synthetic'])
def test_static_equals_dynamic(kit, shared_data, name, frame):
    point_range = dict(kitti=KITTI_RANGE, nuscenes=NUSCENES_RANGE, synthetic=kit.RANGE)[frame]
    dynamic = dynamic_model(kit, name, point_range)
    clouds = dict(kitti=lambda: kitti_cloud(shared_data), nuscenes=lambda: nuscenes_cloud(shared_data),
                  synthetic=lambda: synthetic_clouds(kit))[frame]()
    inputs = preprocess(dynamic, clouds)
    needed = measure_bounds(dynamic, inputs)
    # synthetic: bounds exactly at the needed sizes; real frames: 20 % padding everywhere
    static = static_twin(kit, name, point_range, dynamic, scale_bounds(needed, 1.0 if frame == 'synthetic' else 1.2))
    raw = assert_same(dynamic, static, inputs)
    if name.startswith('fsd') and not name.startswith('fsdv2'):  # grouping did link cells: fewer clusters than foreground cells, several iterations
        assert needed['max_cc_iters'] >= 2 and int(raw['num_instances']) < int(raw['num_fg_points'])


def small_case(kit, name):
    """Dynamic model, preprocessed batch of two synthetic scenes and the measured bounds."""
    dynamic = dynamic_model(kit, name, kit.RANGE)
    inputs = preprocess(dynamic, synthetic_clouds(kit))
    return dynamic, inputs, measure_bounds(dynamic, inputs)


def _labels(needed):
    for key, value in needed.items():
        for i, v in enumerate(value if isinstance(value, list) else [value]):
            if v > 1:
                yield key, (i if isinstance(value, list) else None)


@pytest.mark.parametrize('name', ['fsd', 'fsdv2', 'fsd_refined'])
def test_every_bound_raises_with_name_needed_and_allowed(kit, name):
    dynamic, inputs, needed = small_case(kit, name)
    checked = set()
    for key, index in _labels(needed):
        bounds = {k: list(v) if isinstance(v, list) else v for k, v in scale_bounds(needed, 1.0).items()}
        value = needed[key] if index is None else needed[key][index]
        label = key if index is None else f'{key}[{index}]'
        if index is None:
            bounds[key] = value - 1
        else:
            bounds[key][index] = value - 1
        static = static_twin(kit, name, kit.RANGE, dynamic, bounds)
        with pytest.raises(BoundExceededError) as err, torch.no_grad():
            static(inputs, mode='predict')
        assert (err.value.name, err.value.needed, err.value.allowed) == (label, value, value - 1)
        assert f'bound {label} exceeded: needed {value}, allowed {value - 1}' in str(err.value)
        checked.add(key)
    assert checked == {spec.name for spec in static.detector.bound_schema()}


@pytest.mark.parametrize('name', ['fsd', 'fsdv2'])
def test_exporting_truncates_and_reports_dropped(kit, name):
    dynamic, inputs, needed = small_case(kit, name)
    bounds = scale_bounds(needed, 1.0)
    bounds['max_boxes'] = needed['max_boxes'] - 5
    bounds['max_points'] = needed['max_points'] - 3
    static = static_twin(kit, name, kit.RANGE, dynamic, bounds).detector
    with torch.no_grad():
        si = fixed_inputs(static, inputs, strict=False)
        out = static.forward_static(*si[:6], si.nbrs, inputs['batch_size'], strict=False)
    assert si.dropped[0] == 3 and int(si.num_points) == bounds['max_points']
    names = static.dropped_names('graph')
    assert names[-1] == 'max_boxes' and out['dropped'][-1] >= 1 and int(out['num_boxes']) == bounds['max_boxes']
    assert out['boxes'].shape == (bounds['max_boxes'], 7) and bool(torch.isfinite(out['boxes']).all())
    assert bool((out['scores'][:-1] >= out['scores'][1:]).all())  # best first


GRAPH_OUTPUTS = ('boxes', 'scores', 'labels', 'box_batch', 'num_boxes', 'dropped')
FORBIDDEN = {'nonzero', 'nonzero_static', 'unique', '_unique', '_unique2', 'unique_dim', 'unique_consecutive',
             'masked_select', 'masked_scatter', 'argwhere',
             '_local_scalar_dense'}  # a host read (.item(), int(t)): no CUDA graph can hold it


class OpRecorder(TorchDispatchMode):
    """Records aten op names; fails on data-dependent ops, boolean-mask indexing and fsdlite custom ops."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        assert func.namespace != 'fsdlite', f'custom op {func} in the fixed-shape forward (cannot be exported)'
        assert name not in FORBIDDEN, f'data-dependent op {func} in the fixed-shape forward'
        if name in ('index', 'index_put', 'index_put_'):
            assert not any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None), \
                f'boolean-mask indexing ({func}) in the fixed-shape forward'
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize('name', ['fsd', 'fsdv2', 'fsd_refined'])
def test_fixed_shape_forward_has_one_graph_for_any_batch(kit, monkeypatch, name):
    dynamic, inputs, needed = small_case(kit, name)
    one = preprocess(dynamic, synthetic_clouds(kit)[:1])
    two = preprocess(dynamic, synthetic_clouds(kit)[::-1])
    for batch in (one, two):  # the refiner's best boxes of one scene alone may hold more pairs than of both
        needed = merge_max(needed, measure_bounds(dynamic, batch))
    static = static_twin(kit, name, kit.RANGE, dynamic, scale_bounds(needed, 1.5)).detector
    recorded = []
    for batch in (one, two):
        si = fixed_inputs(static, batch)
        monkeypatch.setattr(torch.compiler, '_is_compiling_flag', True)  # as while exporting: no eager checks
        with torch.no_grad(), OpRecorder() as rec:
            out = static.forward_static(*si[:6], si.nbrs, batch_size=batch['batch_size'])
        recorded.append(rec.ops)
        assert out['dropped'].tolist() == [0] * len(static.dropped_names('graph'))
        graph = DetectorGraph(static, batch['batch_size'], GRAPH_OUTPUTS)  # the export wrapper: flat tensors
        with torch.no_grad():
            flat = graph(*si[:6], *si.nbrs)
        monkeypatch.setattr(torch.compiler, '_is_compiling_flag', False)
        assert len(flat) == len(GRAPH_OUTPUTS) and len(out['dropped']) == len(static.dropped_names('graph'))
        for name_, value in zip(GRAPH_OUTPUTS, flat):
            assert torch.equal(value, out['batch' if name_ == 'box_batch' else name_]), name_
    # same op sequence for one sample and for two different samples: no data-dependent control flow and no
    # Python loop over samples in the fixed-shape forward
    assert recorded[0] == recorded[1] and len(recorded[0]) > 100


def test_static_config_validation(kit):
    cfg = model_cfg(kit, 'fsd', kit.RANGE)
    good = dict(max_points=100, max_voxels=[50, 50], max_fg_points=10, max_boxes=5, max_clusters=5, max_cc_iters=4)
    model = MODELS.build(dict(cfg, bounds=good))
    assert model.bounds['max_fg_points'] == (10, 10, 10)  # a scalar bound is shared by every class
    with pytest.raises(ValueError, match=r"missing \['max_cc_iters'\], unknown \['max_virtual_voxels'\]"):
        MODELS.build(dict(cfg, bounds=dict({k: v for k, v in good.items() if k != 'max_cc_iters'},
                                                        max_virtual_voxels=3)))
    with pytest.raises(ValueError, match='max_voxels needs 2 entries'):
        MODELS.build(dict(cfg, bounds=dict(good, max_voxels=[50, 50, 50])))
    with pytest.raises(ValueError, match='max_boxes must be one int'):
        MODELS.build(dict(cfg, bounds=dict(good, max_boxes=[5, 5])))
    with pytest.raises(ValueError, match='positive int'):
        MODELS.build(dict(cfg, bounds=dict(good, max_points=0)))
    # training runs the dynamic path; the fixed-shape run needs eval mode and bounds
    data = kit.collate([kit.make_scene(1)])
    losses = model(**model.data_preprocessor(data, True), mode='loss')
    assert torch.isfinite(sum(v for k, v in losses.items() if k.startswith('loss')))
    inputs = model.data_preprocessor(data, False)['inputs']
    with pytest.raises(RuntimeError, match='model.eval'):
        predict_fixed_shape(model, inputs)
    with pytest.raises(ValueError, match='needs bounds'):
        predict_fixed_shape(MODELS.build(cfg).eval(), inputs)
    with pytest.raises(ValueError, match="mode must be 'predict' or 'tensor'"):
        FixedShapeDetector(model)(inputs, mode='loss')


@pytest.mark.parametrize('name', ['fsd', 'fsdv2'])
def test_static_empty_cloud(kit, name):
    torch.manual_seed(0)
    bounds = dict(max_points=64, max_voxels=[32, 32], max_fg_points=8, max_boxes=8)
    bounds.update(dict(max_clusters=8, max_cc_iters=4) if name == 'fsd' else dict(max_virtual_voxels=[16, 16]))
    model = FixedShapeDetector(MODELS.build(dict(model_cfg(kit, name, kit.RANGE), bounds=bounds)))
    data = dict(inputs=dict(points=[torch.zeros(0, 4), torch.tensor([[100.0, 0, 0, 0]])]))
    with torch.no_grad():
        samples = model(**model.data_preprocessor(data, False), mode='predict')
    assert [s.pred_instances_3d.bboxes_3d.shape for s in samples] == [(0, 7), (0, 7)]


STATIC_CONFIGS = {'configs/fsd/fsdlite_kitti_static.py': 'kitti', 'configs/fsdv2/fsdv2lite_kitti_static.py': 'kitti',
                  'configs/fsd/fsdlite_synthetic_static.py': None, 'configs/fsdv2/fsdv2lite_synthetic_static.py': None,
                  'configs/fsd/fsdlite_waymo_range.py': None, 'configs/fsdv2/fsdv2lite_waymo_range.py': None}


@pytest.mark.parametrize('path', sorted(STATIC_CONFIGS))
def test_static_configs_build_and_cover_the_kitti_frame(shared_data, path):
    from pathlib import Path

    from mmengine.config import Config
    cfg = Config.fromfile(Path(__file__).resolve().parents[3] / path)
    model = MODELS.build(cfg.model).eval()
    assert set(model.bounds) == {spec.name for spec in model.bound_schema()}  # max_pairs: pair lists
    if STATIC_CONFIGS[path] == 'kitti':
        inputs = model.data_preprocessor(dict(inputs=dict(points=kitti_cloud(shared_data))), False)['inputs']
        for key, value in measure_bounds(model, inputs).items():
            bound = model.bounds[key]
            assert all(v <= b for v, b in zip(value, bound)) if isinstance(value, list) else value <= bound, key
