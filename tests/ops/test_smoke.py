"""The post-build smoke test (fsdlite.ops.smoke): a known invalid call of every op family raises a Python exception
in a fresh process, on the CPU and (where there is one) on the GPU; a crash or a call that does not raise is
reported with the call and the toolchain."""
import pytest
import torch

from fsdlite.ops import build, smoke


def test_every_family_has_a_known_invalid_call():
    assert sorted(smoke.CALLS) == build.families()


def test_invalid_calls_of_every_family_raise_in_a_subprocess():
    lines = build.smoke_check()
    devices = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])
    ok = [line for line in lines if line.startswith('[smoke] ok ')]
    assert len(ok) == len(build.families()) * len(devices), '\n'.join(lines)
    assert any('_Unwind_RaiseException from ' in line for line in lines)  # the toolchain report


@pytest.mark.cuda
def test_invalid_calls_raise_on_cuda_tensors():
    lines = build.smoke_check(devices=['cuda'])
    assert sum(line.startswith('[smoke] ok ') for line in lines) == len(build.families()), '\n'.join(lines)


def test_a_crash_is_reported_with_the_signal_the_call_and_the_toolchain():
    build.load_family('knn')
    library = [('knn', build.library_path('knn'))]
    crash = {'knn': 'import os, signal; os.kill(os.getpid(), signal.SIGSEGV)'}
    with pytest.raises(smoke.OpsSmokeTestError, match=r'(?s)killed by SIGSEGV at "knn on cpu: import os.*'
                                                      r'library compiler .*torch .* built with') as info:
        smoke.smoke_test(library, devices=['cpu'], calls=crash)
    assert info.value.crashed


def test_a_check_that_cannot_run_is_not_a_crash(monkeypatch, capsys):
    """A subprocess that fails before any call (it could not import or load) says nothing about the library: the
    error says the check did not run (crashed=False), and a build only warns."""
    build.load_family('knn')
    with pytest.raises(smoke.OpsSmokeTestError, match='exited with code 1') as info:
        smoke.smoke_test([('knn', '/no/such/library.so')], devices=['cpu'])
    assert info.value.crashed is False
    monkeypatch.setattr(build, 'library_path', lambda family: '/no/such/library.so')
    build._smoke_after_build('knn')  # warns, does not raise
    assert "post-build smoke test of 'knn' did not run" in capsys.readouterr().err


def test_a_call_that_does_not_raise_is_reported():
    build.load_family('knn')
    library = [('knn', build.library_path('knn'))]
    with pytest.raises(smoke.OpsSmokeTestError, match='made an invalid call that did not raise') as info:
        smoke.smoke_test(library, devices=['cpu'], calls={'knn': 'None'})
    assert info.value.crashed


@pytest.mark.parametrize('value, mode', [(None, 'raise'), ('1', 'raise'), ('warn', 'warn'), ('0', 'off'),
                                         ('off', 'off')])
def test_mode_from_the_environment(monkeypatch, value, mode):
    if value is None:
        monkeypatch.delenv(smoke.SMOKE_ENV, raising=False)
    else:
        monkeypatch.setenv(smoke.SMOKE_ENV, value)
    assert smoke.mode() == mode


def test_diagnosis_runs_every_self_test_mode_in_its_own_process():
    """The self-test family raises in six ways (across the boundary, caught inside, inside at::parallel_for, a
    ValueError); here every one behaves, on each device."""
    lines = build.diagnosis()
    devices = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])
    assert len(lines) == len(smoke.MODES) * len(devices) - (len(devices) - 1)  # mode 3 is CPU-only
    assert all(line.startswith('[diagnosis] mode ') and ': ok (' in line for line in lines), lines
    assert any('mode 3 on cpu (c10::Error thrown inside at::parallel_for' in line for line in lines)


@pytest.mark.parametrize('mode, error', [(0, RuntimeError), (1, RuntimeError), (3, RuntimeError), (4, ValueError)])
def test_self_test_modes_raise_in_process(mode, error):
    build.load_family('selftest')
    with pytest.raises(error, match='selftest: '):
        torch.ops.fsdlite._raise_error(torch.zeros(1), mode)
    assert torch.ops.fsdlite._raise_error(torch.ones(2), 2).tolist() == [1.0, 1.0]  # caught inside: returns
