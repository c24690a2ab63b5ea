"""Shared set-up of ``tools/train.py`` and ``tools/test.py``: config loading, overrides, work dir, runner."""
import os
import os.path as osp

import torch
from mmengine.config import Config

from fsdlite import registry  # noqa: F401  (applies the torch>=2.6 checkpoint-loading fix)

from .config_checks import check_cfg_options
from .distributed import LAUNCHERS, setup_cpu_distributed
from .errors import ToolError


def add_runner_args(parser, work_dir_help, cfg_example):
    """Add the options every runner tool shares: ``--work-dir``, ``--cfg-options``, ``--allow-new-cfg-keys``,
    ``--launcher`` and ``--local_rank``; returns ``parser``."""
    from mmengine.config import DictAction
    parser.add_argument('--work-dir', help=work_dir_help)
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, metavar='KEY=VALUE',
                        help=f'override config entries, e.g. {cfg_example} (keys must exist)')
    parser.add_argument('--allow-new-cfg-keys', action='store_true',
                        help='let --cfg-options add keys the config does not have')
    parser.add_argument('--launcher', choices=LAUNCHERS, default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    return parser


def parse_runner_args(parser, argv=None):
    """Parse ``argv`` and export ``LOCAL_RANK`` for the launcher (unless already set); returns the namespace."""
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def load_config(path, cfg_options=None, allow_new_keys=False):
    """Load a config file and apply validated ``--cfg-options`` overrides.

    Args:
        path (str): config file.
        cfg_options (dict | None): dotted overrides from ``DictAction``.
        allow_new_keys (bool): accept override keys the config does not have.
    Returns:
        mmengine.Config
    Raises:
        FileNotFoundError: the config does not exist.
        UnknownConfigKeyError: an override key is not in the config.
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'config file {path!r} does not exist')
    cfg = Config.fromfile(path)
    check_cfg_options(cfg, cfg_options, allow_new_keys)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    return cfg


def prepare_runner_cfg(cfg, config_path, work_dir=None, launcher='none'):
    """Set ``work_dir`` (CLI > config > ``work_dirs/<config name>``) and the launcher (CPU distributed set-up)."""
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('work_dirs', osp.splitext(osp.basename(config_path))[0])
    cfg.launcher = launcher
    setup_cpu_distributed(cfg, launcher)
    return cfg


def enable_amp(cfg):
    """Switch the optimizer wrapper to mmengine's AmpOptimWrapper (needs a CUDA device)."""
    if not torch.cuda.is_available():
        raise ToolError('--amp needs a CUDA device (mmengine AmpOptimWrapper is GPU-only); '
                           'train without --amp on CPU')
    wrapper = cfg.optim_wrapper.get('type', 'OptimWrapper')
    if wrapper == 'AmpOptimWrapper':
        return
    if wrapper != 'OptimWrapper':
        raise ToolError(f'--amp works with optim_wrapper.type="OptimWrapper", got {wrapper!r}')
    cfg.optim_wrapper.type = 'AmpOptimWrapper'
    cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')


def build_runner(cfg):
    """``Runner.from_cfg`` (or the registered ``runner_type``)."""
    from mmengine.runner import Runner
    if 'runner_type' in cfg:
        return registry.RUNNERS.build(cfg)
    return Runner.from_cfg(cfg)


def require_file(path, what):
    """Raise FileNotFoundError naming ``what`` when ``path`` is not a file."""
    if not osp.isfile(path):
        raise FileNotFoundError(f'{what} {path!r} does not exist')
    return path


__all__ = ['load_config', 'prepare_runner_cfg', 'enable_amp', 'build_runner', 'require_file']
