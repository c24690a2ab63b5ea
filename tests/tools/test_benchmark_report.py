"""tools/benchmark_report.py: docs/benchmarks.md from the RESULT lines of benchmark logs."""
import json

import pytest

VOXELNET = {'V=27|M=200|dense': {'ok': True, 'peak_bytes': 115916800, 'seconds': 2.76},
            'V=27|M=200|efficient': {'ok': True, 'peak_bytes': 31789056, 'seconds': 0.28},
            'V=64|M=500|efficient': {'ok': True, 'peak_bytes': 60567552, 'seconds': 9.6},
            'ratio': {'M': 200, 'V': 27, 'memory': 3.65, 'time': 9.84}}
FSD = {'benchmark': 'fsd_latency', 'device': 'cpu', 'threads': 1, 'repeat': 1, 'variants': {
    'kitti/fsd/dynamic': {'stages_ms': {'voxelize': 3.1, 'backbone': 40.2, 'nms': 1.0}, 'total_ms': 44.3,
                          'peak_bytes': float('nan'), 'boxes': 12},
    'kitti/fsd/static': {'stages_ms': {'voxelize': 3.0, 'pre_ops': 5.5, 'backbone': 35.0}, 'total_ms': 43.5,
                         'peak_bytes': 2 ** 27, 'boxes': 12},
    'kitti/fsd/static_over_dynamic': {'time': 0.98, 'memory': None}}}
DEPLOY = {'benchmark': 'deploy_latency', 'threads': 1, 'repeat': 3, 'margin': None, 'results': {
    'fsd': {'ms': {'eager': 50.0, 'eager_spconv': 70.0, 'static': 60.0, 'ort_full': 110.0, 'ort': 88.0},
            'tier': 0.55, 'same': True},
    'voxelnet': {'ms': {'eager': 20.0, 'eager_spconv': 20.0, 'static': 18.0, 'ort_full': 15.0, 'ort': 15.0},
                 'tier': 1, 'same': True}}}
STAGES = {'benchmark': 'deploy_stages', 'threads': 1, 'repeat': 5, 'weights': 'random', 'results': {
    'fsd': {'eager_ms': {'backbone': 27.4, 'sir': 15.2, 'other': 3.3, 'total': 45.9},
            'ort_ms': {'host_pre_ops': 3.0, 'backbone': 75.3, 'sir': 14.7, 'refiner': 28.3, 'total': 121.3},
            'graph_wall_ms': 118.0, 'tier': 0.55, 'boxes': 0,
            'stages': ['host_pre_ops', 'backbone', 'sir', 'refiner', 'other']}}}


def write_log(path, *payloads, noise='torch 2.13.0, 1 thread\n| a | b |\n'):
    path.write_text(noise + ''.join(f'RESULT {json.dumps(p)}\n' for p in payloads))
    return path


@pytest.fixture
def report(tools):
    return tools.load('benchmark_report')


def test_sections_tables_and_plots_replace_only_the_generated_part(report, tmp_path):
    logs = tmp_path / 'logs'
    logs.mkdir()
    paths = [write_log(logs / 'voxelnet_memory.log', VOXELNET), write_log(logs / 'fsd.log', FSD),
             write_log(logs / 'deploy.log', DEPLOY), write_log(logs / 'deploy_stages.log', STAGES),
             write_log(logs / 'ops.log', {'seg|N=5|fsdlite': {'ms': 0.1, 'speedup_vs_baseline': 2.0}})]
    out = tmp_path / 'docs' / 'benchmarks.md'
    out.parent.mkdir()
    out.write_text(f'# Benchmarks\n\nIntro by hand.\n\n{report.BEGIN}\nold\n{report.END}\n\n## History\n\n'
                   '2026-12-04: kept by hand.\n')
    assert report.main([str(p) for p in paths] + ['--out', str(out)]) == 0
    text = out.read_text()
    assert text.startswith('# Benchmarks\n\nIntro by hand.') and text.endswith('2026-12-04: kept by hand.\n')
    assert 'old' not in text and text.count(report.BEGIN) == 1 == text.count(report.END)
    for section in ('### voxelnet_memory', '### fsd_latency', '### deploy_latency', '### deploy_stages', '### ops'):
        assert section in text
    assert '| V=27\\|M=200\\|dense | yes | 110.5 MiB | 2.76 |' in text  # bytes in MiB, '|' escaped in cells
    assert '| kitti/fsd/dynamic | 3.1 | 40.2 | 1 | 44.3 | n/a | 12 |' in text  # stages flattened to columns
    assert 'Settings: device = cpu, threads = 1, repeat = 1.' in text
    for png in ('voxelnet_memory.png', 'fsd_latency.png', 'deploy_latency.png', 'deploy_stages.png'):
        assert (out.parent / 'figures' / png).stat().st_size > 1000
        assert f'](figures/{png})' in text
    assert report.main([str(p) for p in paths] + ['--out', str(out)]) == 0
    assert out.read_text() == text  # regenerating gives the same file


def test_a_file_without_markers_gets_the_generated_part_appended(report, tmp_path):
    out = tmp_path / 'b.md'
    out.write_text('# Mine\n')
    log = write_log(tmp_path / 'slim.log', {'rows': [{'variant': 'original', 'ms': 30.0}, {'variant': 'w0.5',
                                                                                          'ms': 15.0}],
                                            'quick': True, 'fsd_speedup': 2.0})
    assert report.main([str(log), '--out', str(out)]) == 0
    text = out.read_text()
    assert text.startswith('# Mine\n\n' + report.BEGIN) and '### slim' in text
    assert 'Settings: quick = yes, fsd_speedup = 2.' in text and '| 1 | w0.5 | 15 |' in text


def test_unusable_logs_are_one_error_line(report, tmp_path, capsys):
    empty = tmp_path / 'empty.log'
    empty.write_text('no result here\n')
    assert report.main([str(empty), '--out', str(tmp_path / 'x.md')]) == 2
    assert 'empty.log: no "RESULT {json}" line' in capsys.readouterr().err
    broken = tmp_path / 'broken.log'
    broken.write_text('RESULT {not json\n')
    assert report.main([str(broken), '--out', str(tmp_path / 'x.md')]) == 2
    assert 'broken.log:1: the RESULT line is not JSON' in capsys.readouterr().err
    assert not (tmp_path / 'x.md').exists()
