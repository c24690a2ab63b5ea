"""Multi-process training through torchrun with the gloo backend on CPU (2 processes, a few iterations)."""
import sys

import pytest
import torch


@pytest.mark.slow
def test_torchrun_two_processes_gloo(tools, tmp_path):
    work = tmp_path / 'ddp'
    proc = tools.run(['tools/train.py', tools.seg_config, '--launcher', 'pytorch', '--work-dir', work,
                      '--cfg-options', 'train_cfg.max_iters=2', *tools.small],
                     launcher=[sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc-per-node', '2'],
                     timeout=400)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert 'Distributed training: True' in log
    expected_backend = 'nccl' if torch.cuda.is_available() else 'gloo'
    assert f"'backend': '{expected_backend}'" in log
    assert 'Iter(train) [2/2]' in log and 'seg/mIoU' in log  # training and distributed evaluation ran
    ckpt = torch.load(work / 'iter_2.pth', map_location='cpu', weights_only=False)
    assert ckpt['meta']['iter'] == 2
    assert not any(k.startswith('module.') for k in ckpt['state_dict'])  # saved without the DDP wrapper
