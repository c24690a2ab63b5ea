"""LidarDataPreprocessor: collation, voxelization, counted exclusions, empty clouds, bad inputs;
KPDataPreprocessor: truncated neighbourhoods and ignored labels are counted and reported."""
import pytest
import torch

from fsdlite.models.lidar import LidarDataPreprocessor
from fsdlite.ops.voxelize.reference import voxelize_reference


@pytest.fixture
def preprocessor(lidar):
    return LidarDataPreprocessor(voxel_size=lidar.voxel_size, point_range=lidar.point_range, num_point_features=4)


def test_collates_and_matches_reference_voxelization(preprocessor, tiny_batch, lidar):
    out = preprocessor(tiny_batch, training=True)
    inputs = out['inputs']
    clouds = tiny_batch['inputs']['points']
    assert inputs['batch_size'] == 2
    assert inputs['num_points'].tolist() == [300, 200]
    points = torch.cat(clouds)
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor([300, 200]))
    ref = voxelize_reference(points, lidar.voxel_size, lidar.point_range, batch)
    kept = torch.nonzero(ref[1] >= 0).view(-1)
    assert torch.equal(inputs['point_index'], kept)
    assert torch.equal(inputs['points'], points[kept])
    assert torch.equal(inputs['batch'], batch[kept])
    assert torch.equal(inputs['voxel_coors'], ref[0])
    assert torch.equal(inputs['point2voxel'], ref[1][kept])
    assert torch.equal(inputs['voxel_counts'], ref[2])
    assert int(inputs['voxel_counts'].sum()) == kept.numel()
    assert [s.metainfo['num_points'] for s in out['data_samples']] == [300, 200]


def test_excluded_points_are_counted_per_sample(preprocessor, lidar, caplog):
    pts_a = torch.tensor([[0.0, 0.0, 0.0, 0.5],       # kept
                          [100.0, 0.0, 0.0, 0.5],     # out of range (x)
                          [float('nan'), 0, 0, 0.5],  # non-finite coordinate
                          [1.0, 1.0, 0.0, float('inf')],  # non-finite feature
                          [0.0, 0.0, 5.0, 0.5]])      # out of range (z)
    pts_b = torch.tensor([[1.0, 1.0, 1.0, 0.1], [-1.0, -1.0, -1.0, float('-inf')]])
    batch = lidar.collate([lidar.make_sample(pts_a), lidar.make_sample(pts_b)])
    out = preprocessor(batch)
    meta_a, meta_b = (s.metainfo for s in out['data_samples'])
    assert (meta_a['num_points'], meta_a['num_excluded_points'], meta_a['num_out_of_range_points'],
            meta_a['num_non_finite_points']) == (5, 4, 2, 2)
    assert (meta_b['num_points'], meta_b['num_excluded_points'], meta_b['num_out_of_range_points'],
            meta_b['num_non_finite_points']) == (2, 1, 0, 1)
    assert out['inputs']['point_index'].tolist() == [0, 5]
    assert torch.isfinite(out['inputs']['points']).all()
    assert preprocessor.num_excluded_total == 5 and preprocessor.num_points_total == 7


def test_exclusion_warning_is_logged_once(preprocessor, lidar):
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    messages = []
    handler = _ListHandler(messages)
    logger.addHandler(handler)
    try:
        far = torch.tensor([[100.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
        for _ in range(3):
            preprocessor(lidar.collate([lidar.make_sample(far)]))
    finally:
        logger.removeHandler(handler)
    hits = [m for m in messages if 'excluded 1 of 2 points' in m]
    assert len(hits) == 1 and 'outside point_range' in hits[0] and "metainfo['num_excluded_points']" in hits[0]
    assert preprocessor.num_excluded_total == 3 == preprocessor.dropped_totals['num_excluded_points']


class _ListHandler(__import__('logging').Handler):
    def __init__(self, sink):
        super().__init__()
        self.sink = sink

    def emit(self, record):
        self.sink.append(record.getMessage())


def test_empty_clouds(preprocessor, lidar):
    empty = torch.zeros(0, 4)
    out = preprocessor(lidar.collate([lidar.make_sample(empty), lidar.random_scene(50, 3)]))
    inputs = out['inputs']
    assert inputs['num_points'].tolist() == [0, 50]
    assert (inputs['batch'] == 1).all()
    assert inputs['batch_size'] == 2
    all_empty = preprocessor(lidar.collate([lidar.make_sample(empty)]))['inputs']
    assert all_empty['points'].shape == (0, 4) and all_empty['voxel_coors'].shape == (0, 4)
    assert all_empty['batch_size'] == 1


def test_single_tensor_and_dtype(preprocessor):
    out = preprocessor(dict(inputs=dict(points=torch.zeros(3, 4, dtype=torch.float64)), data_samples=None))
    assert out['inputs']['points'].dtype == torch.float32 and out['inputs']['batch_size'] == 1


@pytest.mark.parametrize('points, error, match', [
    ('not a list', TypeError, r"inputs\['points'\] must be a list"),
    ([], ValueError, 'empty list'),
    ([torch.zeros(3, 2)], ValueError, r'shape \(N, C>=3\)'),
    ([torch.zeros(3)], ValueError, r'shape \(N, C>=3\)'),
    ([torch.zeros(3, 5)], ValueError, 'num_point_features=4'),
    ([torch.zeros(3, 4), torch.zeros(3, 3)], ValueError, 'mixes feature widths'),
    ([torch.zeros(3, 4, dtype=torch.bool)], TypeError, 'real-valued'),
    ([[1, 2, 3]], TypeError, 'torch.Tensor'),
])
def test_bad_points(preprocessor, points, error, match):
    with pytest.raises(error, match=match):
        preprocessor(dict(inputs=dict(points=points), data_samples=None))


def test_bad_arguments(lidar):
    with pytest.raises(ValueError, match='voxel_size'):
        LidarDataPreprocessor(voxel_size=(0, 1, 1), point_range=lidar.point_range)
    with pytest.raises(ValueError, match='num_point_features'):
        LidarDataPreprocessor(voxel_size=lidar.voxel_size, point_range=lidar.point_range, num_point_features=2)
    pre = LidarDataPreprocessor(voxel_size=lidar.voxel_size, point_range=lidar.point_range)
    with pytest.raises(ValueError, match='2 point clouds but 1 data samples'):
        batch = lidar.collate([lidar.random_scene(10, 0), lidar.random_scene(10, 1)])
        batch['data_samples'] = batch['data_samples'][:1]
        pre(batch)
    with pytest.raises(KeyError, match='expects data'):
        pre(dict(points=[torch.zeros(1, 4)]))


@pytest.fixture
def logged():
    """Messages mmengine's current logger emits during the test."""
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    messages = []
    handler = _ListHandler(messages)
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)


@pytest.fixture
def shapes():
    """Two synthetic shapes, collated."""
    from mmengine.dataset import pseudo_collate

    from fsdlite.datasets.point_shapes import PointShapesDataset
    ds = PointShapesDataset(num_samples=2, num_points=(300, 400), seed=3)
    return pseudo_collate([ds[i] for i in range(2)])


def test_kp_truncated_neighbourhoods_counted_per_sample_and_warned(shapes, logged):
    from fsdlite.models.kpconv.data_preprocessor import KPDataPreprocessor
    prep = KPDataPreprocessor(first_subsampling_dl=0.1, num_levels=2, neighbor_limits=[4, 4])
    out = prep(shapes)
    pyr, samples = out['inputs'], out['data_samples']
    assert pyr.truncated[0] > 0 and pyr.truncated_pools[0] > 0
    per_sample = [s.metainfo['num_truncated_neighborhoods'] for s in samples]
    per_sample_pools = [s.metainfo['num_truncated_pools'] for s in samples]
    assert [sum(c) for c in zip(*per_sample)] == pyr.truncated and len(per_sample[0]) == 2
    assert [sum(c) for c in zip(*per_sample_pools)] == pyr.truncated_pools and len(per_sample_pools[0]) == 1
    total = sum(len(p) for p in pyr.points)
    found = [m for m in logged if f'KPDataPreprocessor: {sum(pyr.truncated)} of {total} neighbourhoods' in m]
    assert len(found) == 1 and "metainfo['num_truncated_neighborhoods']" in found[0]
    assert len([m for m in logged if 'pooling neighbourhoods' in m and 'num_truncated_pools' in m]) == 1
    prep(shapes)
    assert len([m for m in logged if 'KPDataPreprocessor' in m]) == 2  # once per kind, not per batch
    assert prep.dropped_totals['num_truncated_neighborhoods'] == 2 * sum(pyr.truncated)


def test_kp_truncation_by_max_neighbors_is_counted(shapes):
    from fsdlite.models.kpconv.data_preprocessor import KPDataPreprocessor
    capped = KPDataPreprocessor(first_subsampling_dl=0.1, num_levels=2, neighbor_limits=[64, 64], max_neighbors=4)
    cut = KPDataPreprocessor(first_subsampling_dl=0.1, num_levels=2, neighbor_limits=[4, 4], max_neighbors=64)
    a, b = capped(shapes)['inputs'], cut(shapes)['inputs']
    assert all(torch.equal(x, y) for x, y in zip(a.neighbors, b.neighbors)) and a.neighbors[0].shape[1] == 4
    assert a.truncated == b.truncated and a.truncated[0] > 0  # was 0: counts were compared with 64, not 4


def test_kp_partially_labelled_batch_is_reported(shapes, logged):
    from fsdlite.models.kpconv.data_preprocessor import KPDataPreprocessor
    from fsdlite.structures import PointData
    first = shapes['data_samples'][0]
    first.gt_pts_seg = PointData(pts_semantic_mask=torch.zeros(len(shapes['inputs']['points'][0]), dtype=torch.long))
    prep = KPDataPreprocessor(first_subsampling_dl=0.1, num_levels=2, with_labels=True)
    assert prep(shapes)['inputs'].labels is None
    assert len([m for m in logged if 'ignored the labels of a batch where only 1 of 2 samples have gt_pts_seg'
                in m]) == 1
    assert prep.dropped_totals['batches_without_labels'] == 1
