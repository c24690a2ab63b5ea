"""Errors of the slimming engine."""


class SlimError(ValueError):
    """A slimming request that cannot be honoured (names the offending value and what was expected)."""


__all__ = ['SlimError']
