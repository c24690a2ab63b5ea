"""Bad data as a new user meets it: an empty dataset, an empty or truncated point file, a malformed label or calib
file. Each is a DataError (one line in the tools) naming the dataset or file, never a hang or a silent result."""
import pytest
import torch

from fsdlite.datasets.kitti import KittiDataset
from fsdlite.registry import DATA_SAMPLERS
from fsdlite.utils.errors import DataError, ToolError

def test_data_error_is_a_tool_error_and_a_value_error():
    assert issubclass(DataError, ToolError) and issubclass(DataError, ValueError)


@pytest.mark.parametrize('sampler', ['InfiniteSampler', 'DefaultSampler'])
def test_samplers_refuse_an_empty_dataset(tmp_path, kitti_layout, sampler):
    """mmengine's InfiniteSampler (and an iteration loop over DefaultSampler) waited forever at 100 % CPU."""
    empty = KittiDataset(data_root=str(kitti_layout(tmp_path, frames=())))
    with pytest.raises(DataError, match=rf"KittiDataset has no samples \(data_root='{tmp_path}'.*expected at least "
                                        'one frame'):
        DATA_SAMPLERS.build(dict(type=sampler), default_args=dict(dataset=empty, seed=0))
    assert len(DATA_SAMPLERS.build(dict(type=sampler, shuffle=False), default_args=dict(dataset=[1, 2], seed=0))) >= 2


@pytest.mark.parametrize('points, match', [
    (b'', r'000000.bin\' is empty \(0 bytes\)'),  # used to train this labelled frame with loss 0, no warning
    (bytes(16 * 1024 + 2), r'holds 16386 bytes, not a whole number of 16-byte points'),  # used to load silently
])
def test_bad_point_files_in_a_labelled_frame(tmp_path, kitti_layout, points, match):
    dataset = KittiDataset(data_root=str(kitti_layout(tmp_path, points=points)))
    with pytest.raises(DataError, match=match):
        dataset.raw_results(0)


@pytest.mark.parametrize('field, bad, match', [
    ('label', lambda label: label.replace('3.64', 'abc'), r'KittiDataset could not read its annotations: '
                                                          r'.*000000.txt:1: non-numeric label fields'),
    ('label', lambda label: 'Car 0 0\n', r'000000.txt:1: a KITTI label line has 15 or 16 fields, got 3'),
    ('calib', lambda calib: calib.splitlines()[0] + '\n', r"calib file .* lacks \['R0_rect', 'Tr_velo_to_cam'\]"),
    ('calib', lambda calib: calib.replace('R0_rect: 1 0 0', 'R0_rect: 1 x 0'), r'R0_rect needs 9 numbers'),
])
def test_malformed_labels_and_calibs_are_data_errors(tmp_path, kitti_layout, field, bad, match):
    """The readers' ValueErrors, naming file and line, become DataErrors (one line in the tools, not a traceback)."""
    contents = dict(label=kitti_layout.label, calib=kitti_layout.calib)
    contents[field] = bad(contents[field])
    with pytest.raises(DataError, match=match):
        KittiDataset(data_root=str(kitti_layout(tmp_path, points=bytes(16), **contents)))


def test_a_good_frame_still_loads(tmp_path, kitti_layout):
    points = torch.tensor([[10.0, 0.0, 0.0, 0.5]]).numpy().tobytes()
    raw = KittiDataset(data_root=str(kitti_layout(tmp_path, points=points))).raw_results(0)
    assert raw['points'].shape == (1, 4) and raw['gt_labels_3d'].tolist() == [0]
