"""The studies' tests: run by ``python -m pytest benchmarks/tests studies/tests`` (a stage
of ``.ci/run`` of its own), never by the product's ``pytest tests``.

A study imports the benchmarks' helpers and other studies by their file names, as when run
with ``python studies/<script>.py``: ``studies/`` and ``benchmarks/`` go on ``sys.path``, and
the repository root for the product tests' helpers (``tests.conftest``, ...).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
for _folder in (REPO / "scripts" / "benchmarks", REPO / "scripts" / "studies", REPO):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))
