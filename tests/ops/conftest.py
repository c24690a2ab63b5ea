"""Setup of the op tests: makes the helper modules of this folder (``_kp_helpers``) importable, since the
suite runs with ``--import-mode=importlib`` (no test folder is put on ``sys.path``)."""
import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
