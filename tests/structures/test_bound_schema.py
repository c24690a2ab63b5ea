"""BoundSchema: one declaration of a model's bounds gives the config check, the dropped-count names per stage and
the bounds a capacity tier scales; bad declarations and bad configs raise naming the bound."""
import pytest

from fsdlite.structures.bound_schema import BoundSchema, BoundSpec


def schema():
    return BoundSchema('Net', (
        BoundSpec('max_points', stage='pre'),
        BoundSpec('max_voxels', 2, stage='pre', unet='backbone'),
        BoundSpec('max_pairs', 3, stage='pre', optional=True, pairs_of='max_voxels'),
        BoundSpec('max_fg_points', 2),
        BoundSpec('max_virtual', 2, tier_scaled=True, unet='mixer'),
        BoundSpec('max_boxes')))


def test_normalize_expands_shared_values_and_keeps_optional_ones():
    bounds = schema().normalize(dict(max_points=10, max_voxels=5, max_fg_points=[3, 4], max_virtual=[6, 2],
                                     max_boxes=7, max_pairs=[1, 2, 3]))
    assert bounds.to_dict() == dict(max_points=10, max_voxels=[5, 5], max_pairs=[1, 2, 3], max_fg_points=[3, 4],
                                    max_virtual=[6, 2], max_boxes=7)


@pytest.mark.parametrize('cfg, match', [
    (dict(max_points=1, max_voxels=1, max_fg_points=1, max_virtual=1), r"missing \['max_boxes'\]"),
    (dict(max_points=1, max_voxels=1, max_fg_points=1, max_virtual=1, max_boxes=1, max_x=1), r"unknown \['max_x'\]"),
    (dict(max_points=[1, 2], max_voxels=1, max_fg_points=1, max_virtual=1, max_boxes=1), 'max_points must be one int'),
    (dict(max_points=1, max_voxels=[1, 2, 3], max_fg_points=1, max_virtual=1, max_boxes=1),
     r'max_voxels needs 2 entries .* got \[1, 2, 3\]'),
])
def test_normalize_rejects_bad_configs(cfg, match):
    with pytest.raises(ValueError, match=match):
        schema().normalize(cfg)


def test_dropped_names_follow_the_schema_order_per_stage():
    s = schema()
    without = dict(max_points=1, max_voxels=1, max_fg_points=1, max_virtual=1, max_boxes=1)
    assert s.dropped_names(without, 'pre') == ['max_points', 'max_voxels[0]', 'max_voxels[1]']
    assert s.dropped_names(dict(without, max_pairs=1), 'pre')[-3:] == ['max_pairs[0]', 'max_pairs[1]', 'max_pairs[2]']
    assert s.dropped_names(without, 'graph') == ['max_fg_points[0]', 'max_fg_points[1]', 'max_virtual[0]',
                                                 'max_virtual[1]', 'max_boxes']


def test_tier_scaled_bounds():
    s = schema()
    assert s.tier_scaled() == ('max_points', 'max_voxels', 'max_pairs', 'max_virtual')
    assert s.tier_scaled('graph') == ('max_virtual',)
    assert set(s.required()) == {'max_points', 'max_voxels', 'max_fg_points', 'max_virtual', 'max_boxes'}
    assert s.optional() == dict(max_pairs=3)


def test_bad_declarations_raise():
    with pytest.raises(ValueError, match='repeat'):
        BoundSchema('Net', (BoundSpec('a'), BoundSpec('a')))
    with pytest.raises(ValueError, match="stage 'post'"):
        BoundSchema('Net', (BoundSpec('a', stage='post'),))
    with pytest.raises(ValueError, match='counts the pairs of a, which bounds no UNet'):
        BoundSchema('Net', (BoundSpec('a'), BoundSpec('b', pairs_of='a')))
    with pytest.raises(KeyError, match="Net has no bound 'c'"):
        schema()['c']
