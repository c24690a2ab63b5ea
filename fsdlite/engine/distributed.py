"""Multi-process training without CUDA: gloo process group and a CPU model wrapper.

mmengine 0.10.7 initialises torch.distributed for the ``pytorch`` and ``slurm`` launchers by first
calling ``torch.cuda.set_device`` (fails on CPU-only torch) and wraps the model in DDP with
``device_ids=[LOCAL_RANK]`` (invalid for CPU modules).  :func:`setup_cpu_distributed` initialises
the gloo group itself (the Runner then skips its own initialisation) and sets a wrapper config with
``device_ids=None``.  With CUDA available nothing is changed.
"""
import os
import subprocess

import torch
import torch.distributed as dist

from .errors import ToolError

LAUNCHERS = ('none', 'pytorch', 'slurm')


def _slurm_env():
    """Translate SLURM variables into torch.distributed's (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` ...)."""
    try:
        rank, world, local = (int(os.environ[k]) for k in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_LOCALID'))
    except KeyError as exc:
        raise ToolError(f'--launcher slurm needs the SLURM environment variable {exc.args[0]}; run under srun') \
            from None
    if 'MASTER_ADDR' not in os.environ:
        nodes = os.environ.get('SLURM_NODELIST', '')
        host = subprocess.getoutput(f'scontrol show hostname {nodes} | head -n1').strip() if nodes else ''
        os.environ['MASTER_ADDR'] = host or '127.0.0.1'
    os.environ.setdefault('MASTER_PORT', '29500')
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local))


def setup_cpu_distributed(cfg, launcher):
    """Prepare ``cfg`` (an mmengine Config) for ``launcher`` when torch has no CUDA device.

    Args:
        cfg: config, modified in place (``env_cfg.dist_cfg.backend``, ``model_wrapper_cfg``).
        launcher (str): 'none', 'pytorch' or 'slurm'.
    Returns:
        bool: True when a CPU (gloo) process group was initialised here.
    """
    if launcher not in LAUNCHERS:
        raise ToolError(f'launcher must be one of {LAUNCHERS}, got {launcher!r}')
    if launcher == 'none' or torch.cuda.is_available():
        return False
    if launcher == 'slurm':
        _slurm_env()
    missing = [k for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT') if k not in os.environ]
    if missing:
        raise ToolError(f'--launcher {launcher} needs the environment variables {missing}; start the tool with '
                           'torchrun (e.g. torchrun --nproc-per-node 2 tools/train.py CONFIG --launcher pytorch)')
    env_cfg = cfg.setdefault('env_cfg', {})
    dist_cfg = env_cfg.setdefault('dist_cfg', {})
    dist_cfg['backend'] = 'gloo'
    wrapper = dict(cfg.get('model_wrapper_cfg') or {})
    wrapper.setdefault('type', 'MMDistributedDataParallel')
    wrapper['device_ids'] = None
    wrapper.setdefault('broadcast_buffers', False)
    wrapper.setdefault('find_unused_parameters', cfg.get('find_unused_parameters', False))
    cfg['model_wrapper_cfg'] = wrapper
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo', rank=int(os.environ['RANK']),
                                world_size=int(os.environ['WORLD_SIZE']))
    return True


def shutdown_distributed():
    """Wait for every rank, then destroy the default process group (if one is initialised) before the process exits.

    Without the barrier a rank that finishes first closes its gloo connections while another still talks to it,
    and that rank aborts with 'terminate called without an active exception' after a finished run.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


__all__ = ['LAUNCHERS', 'setup_cpu_distributed', 'shutdown_distributed']
