"""Errors of the slimming engine, and the number check its options share."""
import math


class SlimError(ValueError):
    """A slimming request that cannot be honoured (names the offending value and what was expected)."""


def is_finite_positive(value):
    """True for a real (not bool) finite number > 0 (learning rates, loss weights)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


__all__ = ['SlimError', 'is_finite_positive']
