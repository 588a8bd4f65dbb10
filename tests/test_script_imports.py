"""Importing a benchmark script in a test leaves the session's threads as they were."""

from __future__ import annotations

import os
import sys

from threadpoolctl import ThreadpoolController

from ._scripts import import_script


def test_import_script_undoes_the_thread_pinning_of_bench_utils(monkeypatch):
    # run the pinning code again even if another test module imported it already
    monkeypatch.delitem(sys.modules, "_bench_utils", raising=False)
    monkeypatch.delitem(sys.modules, "bench_config_table", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    pools = {info["prefix"]: info["num_threads"] for info in ThreadpoolController().info()}

    module = import_script("bench_config_table")

    assert hasattr(module, "run_cell") and "_bench_utils" in sys.modules  # the pinning code did run
    assert os.environ["OMP_NUM_THREADS"] == "3" and "NUMBA_NUM_THREADS" not in os.environ
    assert {info["prefix"]: info["num_threads"] for info in ThreadpoolController().info()} == pools
