"""Errors that the command-line tools report as one clear line instead of a traceback (defined in
:mod:`fsdlite.utils.errors`, so that datasets and models can raise them too), and :func:`require_file`."""
import os.path as osp

from ..utils.errors import DataError, ToolError


def require_file(path, what):
    """Raise FileNotFoundError naming ``what`` when ``path`` is not a file; returns ``path``."""
    if osp.isdir(path):
        raise FileNotFoundError(f'{what} {path!r} is a folder; expected a file')
    if not osp.isfile(path):
        raise FileNotFoundError(f'{what} {path!r} does not exist')
    return path


__all__ = ['ToolError', 'DataError', 'require_file']
