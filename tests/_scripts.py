"""Import a benchmark script of ``scripts/`` in a test without its process-wide side effects.

Most scripts import ``scripts/_bench_utils.py`` first, which pins the BLAS/OpenMP pools to one
thread and sets the thread variables of the environment (``OMP_NUM_THREADS`` …), so that the
benchmarks compare single-threaded solvers.  Imported by a test, that would silently make every
later test of the session (and every process it starts) single-threaded, depending on the
order of collection: :func:`import_script` puts both back.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

from threadpoolctl import ThreadpoolController, threadpool_limits

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def import_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module, the thread pools and variables as they were before."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    variables = {name_: os.environ.get(name_) for name_ in _THREAD_VARIABLES}
    pools = {info["prefix"]: info["num_threads"] for info in ThreadpoolController().info()}
    try:
        return importlib.import_module(name)
    finally:
        for name_, value in variables.items():
            if value is None:
                os.environ.pop(name_, None)
            else:
                os.environ[name_] = value
        threadpool_limits(limits={prefix: n for prefix, n in pools.items()})
