"""Shared set-up of the command-line tools (``tools/*.py``, ``deploy/*.py``): option types that reject bad values
with an argparse message, config loading and overrides, checkpoint reading, work dir, runner."""
import argparse
import importlib.util
import math
import os
import os.path as osp
import sys
from pathlib import Path

import torch
from mmengine.config import Config, DictAction
from mmengine.model import is_model_wrapper
from mmengine.runner import Runner
from mmengine.utils import import_modules_from_strings

from fsdlite import registry  # noqa: F401  (applies the torch>=2.6 checkpoint-loading fix)

from .checkpoint import CheckpointMismatchError, load_weights, read_state_dict  # noqa: F401  (tool imports)
from .config_checks import check_cfg_options, check_config_values
from .distributed import LAUNCHERS, setup_cpu_distributed
from .errors import ToolError, require_file
from .schedule import apply_max_iters_override


class CfgOptionsAction(DictAction):
    """mmengine's ``DictAction`` for ``--cfg-options``: an item that is not ``KEY=VALUE`` is a usage error naming
    the item, not a traceback."""

    def __call__(self, parser, namespace, values, option_string=None):
        for item in values if isinstance(values, list) else [values]:
            key, sep, _ = item.partition('=')
            if not sep or not key:
                raise argparse.ArgumentError(self, f'expected KEY=VALUE items, got {item!r}')
        try:
            super().__call__(parser, namespace, values, option_string)
        except (ValueError, AssertionError, IndexError) as exc:
            raise argparse.ArgumentError(self, f'could not parse {values!r} as KEY=VALUE items ({exc})') from None


def number(cast=float, low=None, high=None, low_open=False):
    """An argparse ``type=`` for a finite int/float in a range; anything else is a usage error such as
    ``argument --margin: expected a number >= 1, got 'nan'``.

    Args:
        cast (type): ``int`` or ``float``.
        low, high (float, optional): inclusive bounds (``low`` exclusive with ``low_open``).
    """
    kind = 'an integer' if cast is int else 'a number'
    if low is not None and high is not None:
        expected = f'{kind} in {"(" if low_open else "["}{low:g}, {high:g}]'
    elif low is not None:
        expected = f'{kind} {">" if low_open else ">="} {low:g}'
    else:
        expected = kind if high is None else f'{kind} <= {high:g}'

    def parse(text):
        try:
            value = cast(text)
        except (TypeError, ValueError):
            value = None
        ok = value is not None and math.isfinite(value) and (high is None or value <= high) and (
            low is None or (value > low if low_open else value >= low))
        if not ok:
            raise argparse.ArgumentTypeError(f'expected {expected}, got {text!r}')
        return value
    parse.__name__ = cast.__name__
    return parse


def _first_existing(path):
    probe = osp.abspath(path)
    while not osp.exists(probe):
        probe = osp.dirname(probe)
    return probe


def out_dir(text):
    """An argparse ``type=`` for an output folder (created later): not an existing file, and no file on its way."""
    above = _first_existing(text)
    if not osp.isdir(above):
        what = 'is an existing file' if above == osp.abspath(text) else f'lies under the file {above!r}'
        raise argparse.ArgumentTypeError(f'{text!r} {what}; expected a folder (created when missing)')
    return text


def in_dir(text):
    """An argparse ``type=`` for an existing input folder."""
    if not osp.isdir(text):
        what = 'is a file' if osp.exists(text) else 'does not exist'
        raise argparse.ArgumentTypeError(f'{text!r} {what}; expected an existing folder')
    return text


def out_file(text):
    """An argparse ``type=`` for a file to write: not a folder, and its folder exists."""
    parent = osp.dirname(osp.abspath(text))
    if osp.isdir(text):
        raise argparse.ArgumentTypeError(f'{text!r} is a folder; expected a file name')
    if not osp.isdir(parent):
        raise argparse.ArgumentTypeError(f'{text!r}: folder {parent!r} does not exist; expected a file in an '
                                         'existing folder')
    return text


def add_runner_args(parser, work_dir_help, cfg_example):
    """Add the options every runner tool shares: ``--work-dir``, ``--cfg-options``, ``--allow-new-cfg-keys``,
    ``--launcher`` and ``--local_rank``; returns ``parser``."""
    parser.add_argument('--work-dir', type=out_dir, help=work_dir_help)
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction, metavar='KEY=VALUE',
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
    """Load a config file, apply validated ``--cfg-options`` overrides and check its values.

    An override of ``train_cfg.max_iters`` (or of the config's ``max_iters`` variable) rescales the schedule with
    it and says so in the log (:func:`fsdlite.engine.schedule.apply_max_iters_override`).

    Args:
        path (str): config file.
        cfg_options (dict | None): dotted overrides from ``DictAction``.
        allow_new_keys (bool): accept override keys the config does not have.
    Returns:
        mmengine.Config
    Raises:
        FileNotFoundError: the config does not exist.
        ToolError: the config cannot be parsed, or a value cannot be used
            (:func:`fsdlite.engine.config_checks.check_config_values`).
        UnknownConfigKeyError: an override key is not in the config.
    """
    cfg = read_config(path)
    check_cfg_options(cfg, cfg_options, allow_new_keys)
    if cfg_options:
        old = (cfg.get('train_cfg') or {}).get('max_iters')
        cfg.merge_from_dict(cfg_options)
        apply_max_iters_override(cfg, cfg_options, old)
    return check_config_values(cfg)


def plugin_folder(module, config_path):
    """The folder to put on ``sys.path`` so that ``module`` (a config's ``custom_imports`` entry) imports: None when
    it imports already, else the nearest of the config's folder and its parents that holds the module's top-level
    package or file (so ``examples/plugin/configs/x.py`` finds ``examples/plugin/fsdlite_plugin_example``), or None.
    """
    top = module.split('.')[0]
    if importlib.util.find_spec(top) is not None:
        return None
    folder = Path(config_path).resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / top / '__init__.py').is_file() or (candidate / f'{top}.py').is_file():
            return str(candidate)
    return None


def import_custom_modules(cfg, config_path):
    """Import the config's ``custom_imports`` (mmengine's ``import_modules_from_strings``), first putting on
    ``sys.path`` the folder beside the config that holds a plugin (:func:`plugin_folder`): in-repo plugins
    (``examples/plugin``) load without ``PYTHONPATH`` or ``sys.path`` edits in the scripts.

    Raises:
        ImportError: a module cannot be imported.
    """
    custom = cfg.get('custom_imports')
    if not custom:
        return
    for module in custom.get('imports', []):
        folder = plugin_folder(module, config_path)
        if folder is not None and folder not in sys.path:
            sys.path.insert(0, folder)
    import_modules_from_strings(**custom)


def read_config(path, what='config file'):
    """``Config.fromfile(path)``, custom imports included (:func:`import_custom_modules`); a missing file, a syntax
    error or an unloadable ``_base_`` / ``custom_imports`` raises an error naming ``what`` and ``path``.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ToolError: the file cannot be parsed as an mmengine config.
    """
    require_file(path, what)
    try:
        cfg = Config.fromfile(path, import_custom_modules=False)
        import_custom_modules(cfg, path)
        return cfg
    except SyntaxError as exc:
        where = f'{exc.filename}, ' if exc.filename not in (None, '<unknown>', path) else ''
        raise ToolError(f'{what} {path!r} is not valid Python: {exc.msg} ({where}line {exc.lineno})') from None
    except (OSError, ValueError, NameError, KeyError, ImportError) as exc:
        raise ToolError(f'{what} {path!r} could not be loaded ({type(exc).__name__}: {exc}); expected an mmengine '
                        'config (.py / .json / .yaml)') from None


def prepare_runner_cfg(cfg, config_path, work_dir=None, launcher='none'):
    """Set ``work_dir`` (CLI > config > ``work_dirs/<config name>``) and the launcher (CPU distributed set-up)."""
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('work_dirs', osp.splitext(osp.basename(config_path))[0])
    cfg.launcher = launcher
    setup_cpu_distributed(cfg, launcher)
    return cfg


def check_schedule(cfg):
    """:func:`fsdlite.engine.config_checks.check_config_values` again, for a tool that changed the config after
    :func:`load_config` (e.g. ``tools/demo.py --max-iters``); returns the config."""
    return check_config_values(cfg)


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


def build_runner(cfg, strict_load=True):
    """``Runner.from_cfg`` (or the registered ``runner_type``).

    A ``load_from`` checkpoint (without ``resume``) is loaded strictly here: one of another config raises
    :class:`CheckpointMismatchError` naming the keys that differ, where mmengine would load it non-strictly and
    train from random weights. ``strict_load=False`` (``tools/train.py --partial-load``) keeps mmengine's
    non-strict load, which copies the weights whose names and shapes match.
    """
    runner = registry.RUNNERS.build(cfg) if 'runner_type' in cfg else Runner.from_cfg(cfg)
    load_from = cfg.get('load_from')
    if load_from and not cfg.get('resume'):
        if strict_load:
            load_weights(runner_model(runner), load_from, cfg.filename or 'of this run', 'load_from checkpoint')
        else:
            runner.logger.warning(f'load_from {load_from!r} is loaded non-strictly (--partial-load): weights whose '
                                  'name or shape differs keep their initial values')
    return runner


def latest_checkpoint(work_dir):
    """The checkpoint ``work_dir/last_checkpoint`` names (what ``--resume`` without a path resumes), or None when
    there is no such file.

    Raises:
        ToolError: the file is not the UTF-8 text mmengine writes, or names no existing file.
    """
    path = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(path):
        return None
    advice = 'delete it to start afresh, or pass --resume CHECKPOINT'
    try:
        with open(path, encoding='utf-8') as f:
            named = f.read().strip()
    except UnicodeDecodeError:
        raise ToolError(f'{path} holds binary data; expected the text file mmengine writes there, naming the latest '
                        f'checkpoint ({advice})') from None
    if not named or not osp.isfile(named):
        raise ToolError(f'{path} names {named!r}, which is not a checkpoint file ({advice})')
    return named


def runner_model(runner):
    """The runner's model without its DDP wrapper."""
    return runner.model.module if is_model_wrapper(runner.model) else runner.model


__all__ = ['CheckpointMismatchError', 'CfgOptionsAction', 'number', 'in_dir', 'out_dir', 'out_file', 'add_runner_args',
           'parse_runner_args', 'load_config', 'read_config', 'import_custom_modules', 'plugin_folder',
           'prepare_runner_cfg', 'check_schedule', 'enable_amp',
           'build_runner', 'require_file', 'read_state_dict', 'load_weights', 'latest_checkpoint', 'runner_model']
