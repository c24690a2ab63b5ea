"""Radiation lengths X0 (metres) of the materials a simulated passive volume is made of.

Values are the PDG ones (as used by tomopt); ``DEFAULT_CLASSES`` are the five materials of the
reference's random-block benchmark, in order of decreasing X0 (class id = position).
"""
import torch

RADIATION_LENGTH_M = {
    'air': 303.9,
    'beryllium': 0.3528,
    'carbon': 0.1932,
    'silicon': 0.0937,
    'iron': 0.01757,
    'lead': 0.005612,
    'uranium': 0.003166,
}
DEFAULT_CLASSES = ('beryllium', 'carbon', 'silicon', 'iron', 'lead')


def radiation_lengths(names):
    """X0 in metres of each material name.

    Args:
        names (Sequence[str]): material names (keys of ``RADIATION_LENGTH_M``).
    Returns:
        Tensor: (len(names),) float64.
    """
    unknown = [n for n in names if n not in RADIATION_LENGTH_M]
    if unknown:
        raise ValueError(f'materials {unknown} are unknown; expected names from {sorted(RADIATION_LENGTH_M)}')
    return torch.tensor([RADIATION_LENGTH_M[n] for n in names], dtype=torch.float64)
