"""The benchmark scripts' tests: run by ``python -m pytest benchmarks/tests studies/tests``
(a stage of ``.ci/run`` of its own), never by the product's ``pytest tests``.

The scripts import each other by their file names, as when run with ``python
benchmarks/<script>.py``: ``benchmarks/`` goes on ``sys.path``, and the repository root for
the product tests' helpers (``tests.conftest``, ``tests.test_hik_nsvm``, ...).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
for _folder in (REPO / "scripts" / "benchmarks", REPO):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
