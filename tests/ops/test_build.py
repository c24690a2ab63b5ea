"""The op build system: header edits rebuild the families that include them; a family is built on the first call
of one of its ops, never on import."""
import json
import subprocess
import sys

import pytest
import torch

from fsdlite.ops import build
from fsdlite.ops.build import OPS_ROOT, _sources, headers_digest, included_headers


def test_included_headers_follow_quoted_includes_transitively():
    headers = {str(h.relative_to(OPS_ROOT)) for h in included_headers(_sources('rulebook', with_cuda=True))}
    assert {'rulebook/sorted_rows.h', 'rulebook/rulebook.h', 'include/fsdlite_ops/common.h'} <= headers
    assert not any(h.startswith('knn/') for h in headers)  # only what the family includes


def test_headers_digest_changes_with_an_included_header_only(tmp_path):
    (tmp_path / 'op.cpp').write_text('#include <vector>\n#include "a.h"\nint f();\n')
    (tmp_path / 'a.h').write_text('#pragma once\n#include "b.h"\n')
    (tmp_path / 'b.h').write_text('inline int g() { return 1; }\n')
    (tmp_path / 'unused.h').write_text('inline int h() { return 1; }\n')
    sources = [str(tmp_path / 'op.cpp')]
    assert [h.name for h in included_headers(sources)] == ['a.h', 'b.h']
    before = headers_digest(sources)
    (tmp_path / 'unused.h').write_text('inline int h() { return 2; }\n')
    assert headers_digest(sources) == before
    (tmp_path / 'b.h').write_text('inline int g() { return 2; }\n')  # two levels down
    assert headers_digest(sources) != before


# Runs in a fresh interpreter: prints which families are loaded after each step.
_FIRST_CALL = r'''
import json, torch
import fsdlite.apis, fsdlite.datasets, fsdlite.deploy, fsdlite.engine, fsdlite.evaluation, fsdlite.models, fsdlite.slim
import fsdlite.ops.torch_scatter
from fsdlite.ops import build, scatter_max, segment_reduce
steps = {'imports': sorted(build._LOADED)}
x = torch.tensor([1.0, 3.0, 2.0], requires_grad=True)
scatter_max(x, torch.tensor([0, 1, 0]))[0].sum().backward()  # autograd registered with the library
steps['first call'] = sorted(build._LOADED)
steps['grad'] = x.grad.tolist()
steps['lookup'] = str(torch.ops.fsdlite.boxes_iou_bev)
steps['after lookup'] = sorted(build._LOADED)
print(json.dumps(steps))
'''


def test_imports_build_nothing_and_the_first_call_builds_its_family():
    proc = subprocess.run([sys.executable, '-c', _FIRST_CALL], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = json.loads(proc.stdout.strip().splitlines()[-1])
    assert steps['imports'] == []
    assert steps['first call'] == ['segment_reduce']
    assert steps['grad'] == [0.0, 1.0, 1.0]
    assert steps['after lookup'] == ['iou3d', 'segment_reduce']


def test_every_op_of_every_family_is_known_to_the_namespace():
    owners = build.op_families()
    assert set(owners.values()) == set(build.families())
    assert owners['segment_reduce'] == 'segment_reduce' and owners['nms_bev_mask'] == 'iou3d'
    assert owners['kp_aggregate_backward'] == 'kp_aggregate' and owners['_raise_error'] == 'selftest'
    assert build.family_of('fsdlite::rulebook_pairs') == 'rulebook'
    with pytest.raises(ValueError, match=r"op='fsdlite::nope' is defined by no op family"):
        build.family_of('fsdlite::nope')


def test_registrations_wait_for_the_library_and_run_once(monkeypatch):
    build.load_family('voxelize')
    monkeypatch.setattr(build, '_READY', set())  # as if voxelize's library were loading now
    monkeypatch.setattr(build, '_ON_LOAD', {})
    calls = []
    build.when_loaded('fsdlite::voxelize', lambda: calls.append('first'))
    assert calls == [] and len(build._ON_LOAD['voxelize']) == 1
    build._register('voxelize')  # what load_family does once the library is loaded
    assert calls == ['first'] and build._READY == {'voxelize'} and not build._ON_LOAD
    build.when_loaded('fsdlite::voxelize', lambda: calls.append('later'))  # ready: at once
    assert calls == ['first', 'later']


def test_an_unknown_op_is_torchs_attribute_error():
    with pytest.raises(AttributeError, match='no_such_op'):
        torch.ops.fsdlite.no_such_op  # noqa: B018
