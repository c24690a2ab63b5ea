"""Deploy bounds: read them from a file, measure them with a margin.

A bounds file is either JSON (``{"max_points": 32768, "max_voxels": [9000, 8000, 3500], ...}``) or the Python
snippet ``tools/collect_bounds.py --out FILE`` writes (``bounds = dict(...)``).
"""
import json
from pathlib import Path

from ..engine.tool_setup import read_config
from ..structures.bounds import scale_bounds


def load_bounds_file(path):
    """dict of bounds from a ``.json`` file or a Python config file defining ``bounds = dict(...)``.

    Raises:
        FileNotFoundError: no such file; ValueError: the file defines no ``bounds`` dict.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'bounds file {str(path)!r} does not exist')
    if path.suffix == '.json':
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise ValueError(f'bounds file {str(path)!r} is not valid JSON ({exc})') from None
        data = data.get('bounds', data) if isinstance(data, dict) else data
    else:
        cfg = read_config(str(path), 'bounds file')
        data = cfg.get('bounds')
        data = data.to_dict() if hasattr(data, 'to_dict') else data
    if not isinstance(data, dict) or not data:
        raise ValueError(f'bounds file {str(path)!r} must define a non-empty dict of bounds (JSON object, or '
                         f'"bounds = dict(...)" as tools/collect_bounds.py --out writes), got {data!r}')
    return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in data.items()}


def with_margin(maxima, margin):
    """``ceil(value * margin)`` (at least 1) of every entry of a ``name -> int | list[int]`` dict."""
    if not margin >= 1:
        raise ValueError(f'margin must be >= 1, got {margin!r}')
    return scale_bounds(maxima, margin)


__all__ = ['load_bounds_file', 'with_margin']
