"""Reporting of dropped data: nothing is dropped silently.

A component (dataset, transform, data preprocessor) that removes, clips, truncates or skips data
stores the per-sample count in the sample (a results-dict counter that ``Pack3DDetInputs`` copies into
``data_sample.metainfo``, or the metainfo directly) and calls :func:`report_dropped`, which keeps running
totals in ``owner.dropped_totals`` and logs one WARNING through mmengine's current logger the first time
each kind of drop happens in the component (once per worker process).
"""
import logging
from collections import Counter

from mmengine.logging import print_log


def report_dropped(owner, kind, count, detail, in_metainfo=True):
    """Add ``count`` to ``owner.dropped_totals[kind]``; the first time ``kind`` is dropped, warn.

    Args:
        owner: the component that dropped the data; its class name starts the message.
        kind (str): what was dropped; with ``in_metainfo`` also the metainfo key of the per-sample counts.
        count (int): number dropped now; 0 does nothing.
        detail (str | callable): the counts in words, e.g. ``'dropped 3 of 120 points of sample 7 (...)'``;
            a callable is only evaluated when the warning is logged.
        in_metainfo (bool): whether per-sample counts are in ``data_sample.metainfo[kind]``.
    Returns:
        bool: whether a warning was logged.
    """
    count = int(count)
    if count <= 0:
        return False
    if getattr(owner, 'dropped_totals', None) is None:
        owner.dropped_totals = Counter()
    owner.dropped_totals[kind] += count
    warned = getattr(owner, '_dropped_warned', None)
    if warned is None:
        warned = owner._dropped_warned = set()
    if kind in warned:
        return False
    warned.add(kind)
    text = detail() if callable(detail) else detail
    name = type(owner).__name__
    where = f"per-sample counts are in data_sample.metainfo['{kind}'], " if in_metainfo else ''
    print_log(f'{name}: {text}; {where}running totals in {name}.dropped_totals; this warning is shown once.',
              logger='current', level=logging.WARNING)
    return True


__all__ = ['report_dropped']
