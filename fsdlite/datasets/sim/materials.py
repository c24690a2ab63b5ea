"""Surface materials of the simulated world (one place for every reflectance and porosity).

Chosen by looking at KITTI's readings (``../shared/reference/data.md`` section 1.4 and the scans themselves):
road, sidewalks and terrain read 0.2-0.4 at every range (a matte response that hardly falls with the grazing
angle); foliage and facades somewhat brighter; car bodies mostly dark, because glossy paint returns little
except head-on (about half of KITTI's car points read exactly 0); most rays pass car glass (to the interior or
what lies behind the car); clothes read bright whatever their colour; number plates, signs and road markings are
retro-reflective.
"""
from .geometry import FACADE, GLASS, MESH, VOLUME, Material


def asphalt(rng):
    return Material(rng.uniform(0.2, 0.38), gloss=0.1)


def concrete(rng):
    return Material(rng.uniform(0.25, 0.42), gloss=0.1)


def terrain(rng):
    return Material(rng.uniform(0.22, 0.45), gloss=0.1)


def facade(rng):
    """A building wall; ``a`` = the share of each window bay that is glass."""
    return Material(rng.uniform(0.18, 0.5), FACADE, a=rng.uniform(0.15, 0.45), gloss=0.3)


def wall(rng):
    return Material(rng.uniform(0.18, 0.5), gloss=0.3)


def fence(rng):
    """A mesh or slatted fence: rays pass with probability ``a``."""
    return Material(rng.uniform(0.2, 0.6), MESH, a=rng.uniform(0.3, 0.75), gloss=0.3)


def foliage(rng, mean_free_path):
    """Leaves: porous matter a ray enters ``mean_free_path`` metres on average."""
    return Material(rng.uniform(0.28, 0.5), VOLUME, a=mean_free_path, gloss=0.1)


def bark(rng):
    return Material(rng.uniform(0.2, 0.4), gloss=0.3)


def metal(rng):
    """Poles, rails, bins."""
    return Material(rng.uniform(0.2, 0.6), gloss=0.8)


def retro(rng):
    """Retro-reflective sheeting: signs, number plates."""
    return Material(rng.uniform(0.7, 1.0), gloss=0.0)


def paint(rng):
    """Car paint: dark, mid or light, glossy."""
    band = ((0.03, 0.12), (0.12, 0.3), (0.3, 0.55))[rng.choice(3, p=[0.35, 0.4, 0.25])]
    return Material(rng.uniform(*band), gloss=2.0)


def car_glass(rng):
    """Windows: a ray passes with probability ``a``, else it returns from the interior with probability ``b``."""
    return Material(0.05, GLASS, a=rng.uniform(0.55, 0.85), b=0.3, gloss=1.0)


def tyre(rng):
    return Material(rng.uniform(0.02, 0.07), gloss=0.5)


def spokes(rng):
    """A spoked wheel: most rays pass."""
    return Material(rng.uniform(0.05, 0.12), MESH, a=0.65, gloss=0.5)


def clothes(rng):
    """Fabric: matte and bright at 905 nm whatever its colour (KITTI's pedestrians read 0.3-0.4, poles 0.17)."""
    return Material(rng.uniform(0.25, 0.55), gloss=0.15)


def skin(rng):
    return Material(rng.uniform(0.3, 0.5), gloss=0.15)


__all__ = ['asphalt', 'concrete', 'terrain', 'facade', 'wall', 'fence', 'foliage', 'bark', 'metal', 'retro', 'paint',
           'car_glass', 'tyre', 'spokes', 'clothes', 'skin']
