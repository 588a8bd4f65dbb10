"""Importing a benchmark script has no side effect on the process: the thread pools and the
thread variables of the environment stay as they were.  A script pins them to one thread by
calling ``_bench_utils.pin_threads()`` in its ``main()``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from threadpoolctl import ThreadpoolController

BENCHMARKS = Path(__file__).resolve().parents[1]
MODULES = sorted(p.stem for p in BENCHMARKS.glob("*.py"))


def _pools() -> dict[str, int]:
    return {info["prefix"]: info["num_threads"] for info in ThreadpoolController().info()}


@pytest.mark.parametrize("name", MODULES)
def test_importing_a_benchmark_leaves_the_threads_as_they_were(name, monkeypatch):
    # run the module's code again even if another test imported it already
    for module in ("_bench_utils", name):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    for variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)
    pools = _pools()
    path = list(sys.path)

    module = importlib.import_module(name)

    assert module.__file__ == str(BENCHMARKS / f"{name}.py")
    assert os.environ["OMP_NUM_THREADS"] == "3"
    assert not {"OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"} & set(os.environ)
    assert _pools() == pools
    assert sys.path == path


def test_pin_threads_pins_this_process_and_its_children():
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
        "import numpy\n"
        "from threadpoolctl import ThreadpoolController\n"
        "import _bench_utils as U\n"
        "U.pin_threads()\n"
        "assert all(os.environ[v] == '1' for v in U.THREAD_VARIABLES)\n"
        "assert all(i['num_threads'] == 1 for i in ThreadpoolController().info())\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
