"""Deploy plumbing without exports: bounds files, margins, adapter lookup, deploy-folder checks, output diffs."""
import json

import pytest
import torch

from fsdlite.deploy import adapter_class, read_deploy_info
from fsdlite.deploy.bounds_io import load_bounds_file, with_margin
from fsdlite.structures.bounds import merge_max
from fsdlite.deploy.compare import matched_rows_diff, tensor_diff
from fsdlite.deploy.exporter import FORMAT


def test_bounds_files(tmp_path):
    snippet = tmp_path / 'b.py'
    snippet.write_text('bounds = dict(max_points=100, max_voxels=(10, 8))\n')
    assert load_bounds_file(snippet) == dict(max_points=100, max_voxels=[10, 8])
    js = tmp_path / 'b.json'
    js.write_text(json.dumps(dict(bounds=dict(max_points=7))))
    assert load_bounds_file(js) == dict(max_points=7)
    js.write_text('[]')
    with pytest.raises(ValueError, match=r"must define a non-empty dict of bounds .* got \[\]"):
        load_bounds_file(js)
    with pytest.raises(FileNotFoundError, match='nope.json'):
        load_bounds_file(tmp_path / 'nope.json')


def test_margins_and_maxima():
    acc = merge_max({}, dict(a=3, b=[1, 5]))
    assert merge_max(acc, dict(a=2, b=[4, 2])) == dict(a=3, b=[4, 5])
    assert with_margin(dict(a=10, b=[1, 3]), 1.5) == dict(a=15, b=[2, 5])
    with pytest.raises(ValueError, match='margin must be >= 1, got 0.5'):
        with_margin(dict(a=1), 0.5)


def test_adapter_lookup():
    assert adapter_class('FSDLite').family == adapter_class('FSDv2Lite').family == 'detector'
    assert adapter_class('VoxelNet').family == 'voxelnet'
    assert adapter_class('KPFCNN').family == adapter_class('KPCNN').family == 'kpconv'
    with pytest.raises(ValueError, match="no deploy adapter for model type 'SparseSegmentor'; supported: "):
        adapter_class('SparseSegmentor')


def test_deploy_folder_checks(tmp_path):
    with pytest.raises(FileNotFoundError, match='no deploy.json'):
        read_deploy_info(tmp_path)
    (tmp_path / 'deploy.json').write_text(json.dumps(dict(format='other/0')))
    with pytest.raises(ValueError, match=f"format 'other/0' is not '{FORMAT}'"):
        read_deploy_info(tmp_path)
    (tmp_path / 'deploy.json').write_text(json.dumps(dict(format=FORMAT, onnx='model.onnx', config='config.py')))
    with pytest.raises(FileNotFoundError, match='model.onnx is missing'):
        read_deploy_info(tmp_path)


def test_output_diffs():
    d = tensor_diff('x', torch.tensor([1.0, float('inf'), 3.0]), torch.tensor([1.0, float('inf'), 3.5]), 1e-4)
    assert d.max_abs == 0.5 and not d.ok and d.compared == 3
    assert tensor_diff('n', torch.tensor([float('nan')]), torch.tensor([1.0])).max_abs == float('inf')
    with pytest.raises(ValueError, match=r'x: deployed shape \(2,\) differs from PyTorch \(3,\)'):
        tensor_diff('x', torch.zeros(2), torch.zeros(3))
    rows = torch.tensor([[0.0, 0.0], [5.0, 5.0]])
    swapped = rows.flip(0) + 1e-6
    assert matched_rows_diff('r', rows, swapped).max_abs < 2e-6  # order-free
    keys = (torch.tensor([0, 1]), torch.tensor([0, 1]))  # same rows but now only same-key rows may match
    assert matched_rows_diff('r', rows, swapped, keys).max_abs > 4
