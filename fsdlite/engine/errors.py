"""Errors that the command-line tools report as one clear line instead of a traceback."""


class ToolError(RuntimeError):
    """A user-facing set-up problem (bad option, missing file, unusable environment)."""


__all__ = ['ToolError']
