"""Validation of channel specifications from configs (flat per-stage tuples)."""


def channel_tuple(name, channels):
    """Return ``channels`` as a tuple of positive ints.

    Args:
        name (str): config key used in error messages.
        channels (Sequence[int]): e.g. ``(64, 64)``.
    Raises:
        TypeError / ValueError naming ``name`` and the offending value.
    """
    if isinstance(channels, (str, bytes)) or not hasattr(channels, '__iter__'):
        raise TypeError(f'{name} must be a sequence of channel counts, got {channels!r}')
    out = []
    for c in channels:
        if isinstance(c, bool) or not isinstance(c, int) or c <= 0:
            raise ValueError(f'{name} must contain positive integer channel counts, got {channels!r}')
        out.append(int(c))
    return tuple(out)


def stage_channels(name, stages, length=None):
    """Return per-stage channel tuples, e.g. ``((16,), (32, 32))``, validated.

    Args:
        name (str): config key used in error messages.
        stages (Sequence[Sequence[int]]): one non-empty channel tuple per stage.
        length (int | None): required number of entries per stage.
    Returns:
        tuple[tuple[int, ...], ...]
    """
    if isinstance(stages, (str, bytes)) or not hasattr(stages, '__iter__'):
        raise TypeError(f'{name} must be a sequence of per-stage channel tuples, got {stages!r}')
    out = tuple(channel_tuple(f'{name}[{i}]', s) for i, s in enumerate(stages))
    if not out:
        raise ValueError(f'{name} must have at least one stage, got {stages!r}')
    for i, s in enumerate(out):
        if not s:
            raise ValueError(f'{name}[{i}] must not be empty, got {stages!r}')
        if length is not None and len(s) != length:
            raise ValueError(f'{name}[{i}] must have {length} entries, got {s!r}')
    return out


__all__ = ['channel_tuple', 'stage_channels']
