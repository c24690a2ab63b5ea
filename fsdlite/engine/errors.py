"""Errors that the command-line tools report as one clear line instead of a traceback (defined in
:mod:`fsdlite.utils.errors`, so that datasets and models can raise them too)."""
from ..utils.errors import DataError, ToolError

__all__ = ['ToolError', 'DataError']
