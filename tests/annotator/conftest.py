"""Make ``tests.annotator.*`` importable however pytest is started.

The suite runs with ``--import-mode=importlib``, which leaves ``sys.path`` alone; the grid and
the reference are plain modules next to the tests, imported as ``tests.annotator.<name>``.
"""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
