"""Deploy bounds: read them from a file, measure them with a margin.

A bounds file is either JSON (``{"max_points": 32768, "max_voxels": [9000, 8000, 3500], ...}``) or the Python
snippet ``tools/collect_bounds.py --out FILE`` writes (``bounds = dict(...)``).
"""
import json
import math
from pathlib import Path


def load_bounds_file(path):
    """dict of bounds from a ``.json`` file or a Python config file defining ``bounds = dict(...)``.

    Raises:
        FileNotFoundError: no such file; ValueError: the file defines no ``bounds`` dict.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'bounds file {str(path)!r} does not exist')
    if path.suffix == '.json':
        data = json.loads(path.read_text())
        data = data.get('bounds', data) if isinstance(data, dict) else data
    else:
        from mmengine.config import Config
        cfg = Config.fromfile(str(path))
        data = cfg.get('bounds')
        data = data.to_dict() if hasattr(data, 'to_dict') else data
    if not isinstance(data, dict) or not data:
        raise ValueError(f'bounds file {str(path)!r} must define a non-empty dict of bounds (JSON object, or '
                         f'"bounds = dict(...)" as tools/collect_bounds.py --out writes), got {data!r}')
    return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in data.items()}


def merge_max(acc, needed):
    """Elementwise maximum of ``name -> int | list[int]`` dicts (updates and returns ``acc``)."""
    for key, value in needed.items():
        old = acc.get(key)
        if old is None:
            acc[key] = list(value) if isinstance(value, (list, tuple)) else value
        elif isinstance(value, (list, tuple)):
            acc[key] = [max(a, b) for a, b in zip(old, value)]
        else:
            acc[key] = max(old, value)
    return acc


def with_margin(maxima, margin):
    """``ceil(value * margin)`` (at least 1) of every entry of a ``name -> int | list[int]`` dict."""
    if not margin >= 1:
        raise ValueError(f'margin must be >= 1, got {margin!r}')

    def scale(v):
        return max(int(math.ceil(v * margin - 1e-9)), 1)

    return {k: [scale(v) for v in value] if isinstance(value, (list, tuple)) else scale(value)
            for k, value in maxima.items()}


__all__ = ['load_bounds_file', 'merge_max', 'with_margin']
