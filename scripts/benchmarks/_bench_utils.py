"""Helpers shared by the benchmark scripts (and the studies of ``studies/``).

Importing this module has no side effect: a script pins the BLAS/OpenMP thread pools to one
thread by calling :func:`pin_threads` first thing in its ``main()`` (benchmarks compare
single-threaded solvers).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.model_selection import StratifiedKFold

from classify_images.pipeline.settings.dataset import split_indices
from classify_images.pipeline.storage.feature_store import load_feature_set
from classify_images.pipeline.training.evaluation import mean_per_class_accuracy

__all__ = [
    "THREAD_VARIABLES",
    "pin_threads",
    "LINEAR_C_GRID",
    "scaled_C_grid",
    "Features",
    "load_features",
    "wait_for",
    "resplit",
    "select_by_cv",
    "EMULATION_VARIABLES",
    "machine",
    "machine_line",
    "announce_machine",
    "instruction_set",
    "processor_model",
    "write_json",
    "mean_per_class_accuracy",
]


#: The environment variables that set the thread count of BLAS, OpenMP and numba.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def pin_threads() -> None:
    """One thread for this process and the processes it starts: the thread variables of the
    environment set to 1 (read by libraries loaded later and by child processes) and the
    BLAS/OpenMP pools already loaded limited to one thread (threadpoolctl).  Called by a
    script's ``main()``, never on import."""
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


#: C values tried for QuadraticHingeSVC (cross-validated on training rows only).
LINEAR_C_GRID = [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0]


def scaled_C_grid(X: np.ndarray, grid: list[float] = LINEAR_C_GRID) -> list[float]:
    """``grid`` divided by the mean squared norm of the rows of ``X``.

    The squared hinge term scales with ``C ||x||^2``: L2-normalised features
    (ScSPM) keep ``grid`` as it is, L1-normalised histograms (LSPM, ``||x||^2``
    of order 1e-3) get values a thousand times larger.  Values are rounded to
    3 significant digits.
    """
    scale = float(np.mean(np.einsum("ij,ij->i", X, X, dtype=np.float64)))
    return [float(f"{c / scale:.3g}") for c in grid]


@dataclass
class Features:
    """The arrays of a feature set (memory-mapped float32) and its identity."""

    path: Path
    X_train: np.ndarray
    X_test: np.ndarray
    y_train: np.ndarray
    y_test: np.ndarray
    config_hash: str
    class_names: list[str]
    manifest: dict

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        """All stored rows ``X_train`` then ``X_test`` (in memory) and their labels."""
        return np.concatenate([self.X_train, self.X_test]), np.concatenate([self.y_train, self.y_test])


def wait_for(folder: str | os.PathLike, minutes: float) -> None:
    """Poll every 60 s (up to ``minutes``) until ``folder/manifest.json`` exists."""
    manifest = Path(folder) / "manifest.json"
    deadline = time.monotonic() + 60.0 * minutes
    while not manifest.exists():
        if time.monotonic() > deadline:
            sys.exit(f"error: {manifest} did not appear within {minutes:g} min (feature set not built)")
        print(f"waiting for {manifest} ...", flush=True)
        time.sleep(60)


def load_features(folder: str | os.PathLike, wait_minutes: float = 0.0) -> Features:
    """Load a feature set (after waiting up to ``wait_minutes`` for it to appear)."""
    wait_for(folder, wait_minutes)
    folder = Path(folder)
    fs = load_feature_set(folder)
    return Features(
        folder,
        fs.X_train,
        fs.X_test,
        np.asarray(fs.y_train),
        np.asarray(fs.y_test),
        fs.config_hash,
        fs.class_names,
        fs.manifest,
    )


def resplit(labels: np.ndarray, n_train: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded per-class split of pooled rows: ``n_train`` per class, the rest for testing."""
    return split_indices(labels, n_train, None, seed)


def select_by_cv(
    fit_score: Callable[[Any, np.ndarray, np.ndarray], float],
    grid: list,
    y: np.ndarray,
    *,
    folds: int = 3,
    seed: int = 0,
) -> tuple[Any, dict]:
    """The grid value of best mean held-out score over stratified folds of the training set.

    ``fit_score(value, train_index, valid_index)`` trains on ``train_index``
    and returns the mean per-class accuracy on ``valid_index``.  Ties go to the
    first (smallest) value of ``grid``.  Returns ``(best, {value: mean score})``.
    """
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    splits = list(splitter.split(np.zeros(y.size), y))
    scores = {value: float(np.mean([fit_score(value, tr, va) for tr, va in splits])) for value in grid}
    best = max(grid, key=lambda value: scores[value])
    return best, scores


def paired_differences(cell: dict, baseline: dict) -> np.ndarray:
    """Per split, ``cell``'s accuracy minus ``baseline``'s on the same split, in points
    (cells of ``bench_config_table.run_cell``; ValueError when their splits differ)."""
    seeds = [r["seed"] for r in cell["runs"]]
    if seeds != [r["seed"] for r in baseline["runs"]]:
        raise ValueError(f"paired difference: splits {seeds} against {[r['seed'] for r in baseline['runs']]}")
    return 100 * (np.array([r["accuracy"] for r in cell["runs"]]) - np.array([r["accuracy"] for r in baseline["runs"]]))


def best_time(fn: Callable[[], Any], repeats: int = 5, clock: Callable[[], float] = time.perf_counter) -> float:
    """Smallest of ``repeats`` timings of ``fn()`` by ``clock`` (wall by default;
    ``time.process_time`` for CPU seconds)."""
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times)


#: Environment variables that make a library compile or dispatch for another processor than
#: this one (``NUMBA_CPU_NAME=haswell OPENBLAS_CORETYPE=Haswell`` emulates an AVX2-only CPU).
EMULATION_VARIABLES = (
    "NUMBA_CPU_NAME",
    "NUMBA_CPU_FEATURES",
    "OPENBLAS_CORETYPE",
    "MKL_ENABLE_INSTRUCTIONS",
    "NPY_DISABLE_CPU_FEATURES",
)


def _cpuinfo() -> tuple[str, set[str]]:
    """The first ``model name`` and ``flags`` of ``/proc/cpuinfo`` (``("", set())`` without it)."""
    model, flags = "", set()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return model, flags


def processor_model() -> str:
    """The processor's model name (first ``model name`` of ``/proc/cpuinfo``; else the platform's word)."""
    return _cpuinfo()[0] or platform.processor() or platform.machine()


def instruction_set(flags: set[str]) -> str:
    """The widest x86 vector extension among the CPU ``flags``: ``AVX-512``, ``AVX2``, ``SSE``
    (or ``unknown`` without flags, e.g. not Linux or not x86)."""
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    return "SSE" if flags else "unknown"


def machine() -> dict:
    """Where a benchmark ran, recorded with its numbers (``"machine"`` of its JSON output).

    ``model`` and ``isa`` (the widest vector extension, :func:`instruction_set`) describe the
    processor; ``numba_cpu`` is the processor numba compiles for (``NUMBA_CPU_NAME`` when set,
    else LLVM's host name), ``emulation`` the variables of :data:`EMULATION_VARIABLES` that
    are set, and ``blas`` the BLAS/OpenMP libraries loaded now (threadpoolctl: library,
    version, threads and, for OpenBLAS, the core type its kernels were chosen for).
    """
    model, flags = _cpuinfo()
    info: dict[str, Any] = {
        "model": model or platform.processor() or platform.machine(),
        "isa": instruction_set(flags),
        "cores": os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "numba_cpu": None,
        "emulation": {name: os.environ[name] for name in EMULATION_VARIABLES if os.environ.get(name)},
        "blas": [],
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    try:
        import llvmlite.binding as llvm

        info["numba_cpu"] = os.environ.get("NUMBA_CPU_NAME") or llvm.get_host_cpu_name()
    except Exception:
        pass
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [
            {key: pool.get(key) for key in ("internal_api", "version", "num_threads", "architecture")}
            for pool in threadpool_info()
        ]
    except Exception:
        pass
    return info


def machine_line(info: dict) -> str:
    """One line saying where a benchmark ran, from :func:`machine`'s ``info``."""
    pools = ", ".join(
        " ".join(str(part) for part in (pool["internal_api"], pool["architecture"]) if part)
        + f" {pool['num_threads']} thr"
        for pool in info["blas"]
    )
    emulation = " ".join(f"{name}={value}" for name, value in info["emulation"].items())
    return (
        f"machine: {info['model']} ({info['isa']}), {info['cores']} cores; numba target {info['numba_cpu']}"
        + (f"; {pools}" if pools else "")
        + (f"; emulating: {emulation}" if emulation else "")
    )


def announce_machine() -> dict:
    """Print where this benchmark runs (:func:`machine_line`) and return :func:`machine`'s
    record for the script's JSON output: called first thing in every script's ``main()``
    (after :func:`pin_threads`, so the thread counts shown are the ones measured)."""
    info = machine()
    print(machine_line(info), flush=True)
    return info


def write_json(path: str | os.PathLike | None, payload: dict) -> None:
    """Write ``payload`` to ``path`` (if given) as indented JSON."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
