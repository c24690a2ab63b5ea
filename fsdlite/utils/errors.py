"""Errors that the command-line tools report as one clear line instead of a traceback.

They live at the bottom of the package so every layer can raise them: the tools catch :class:`ToolError` (and
with it :class:`DataError`) and print ``<tool>: error: <message>`` with exit status 2.
"""


class ToolError(RuntimeError):
    """A user-facing set-up problem (bad option, missing file, unusable environment)."""


class DataError(ToolError, ValueError):
    """A data file, label or dataset that cannot be used; the message names the file (or dataset) and what is
    wrong. Also a ``ValueError``, the type the format readers raised before."""


__all__ = ['ToolError', 'DataError']
