"""How the classifiers split their work over threads.

The one-vs-rest problems of a classifier are trained in *groups*: the problems
of a group share every pass over the training examples (the kernels visit an
example once for all of them), and the groups run in joblib threads (the numba
kernels release the GIL, so threads avoid copying the data to processes).
Prediction splits the rows into blocks alike.  Neither the grouping nor the
number of threads changes any number: each problem's arithmetic is its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs

__all__ = ["even_bounds", "log_problem_groups", "map_tasks", "n_threads", "padded_width", "problem_groups"]

_log = logging.getLogger(__name__)


def n_threads(n_jobs: int | None) -> int:
    """Threads an estimator's ``n_jobs`` stands for: 1 for None or 1, else joblib's count (``-1``: all CPUs)."""
    return 1 if n_jobs in (None, 1) else effective_n_jobs(n_jobs)


def even_bounds(n_items: int, n_parts: int) -> np.ndarray:
    """Bounds ``b`` (int64, length ``n_parts + 1``) of ``n_parts`` near-equal ranges ``b[k]:b[k+1]`` of ``n_items``."""
    return np.linspace(0, n_items, n_parts + 1).astype(np.int64)


def problem_groups(n_problems: int, threads: int, max_group: int | None = None) -> np.ndarray:
    """Bounds of the groups of problems: one group per thread, none larger than ``max_group``.

    ``min(n_problems, max(ceil(n_problems / max_group), threads))`` near-equal groups
    (:func:`even_bounds`); ``max_group=None`` puts no limit on their size.
    """
    n_groups = max(threads, 1) if max_group is None else max(-(-n_problems // max_group), threads)
    return even_bounds(n_problems, min(n_problems, n_groups))


def padded_width(width: int, multiple: int = 8) -> int:
    """``width`` rounded up to a multiple of ``multiple`` (vector-friendly loop lengths)."""
    return -(-width // multiple) * multiple


def map_tasks(
    solve: Callable[[int], Any], n_tasks: int, threads: int, done: Callable[[int], None] | None = None
) -> list:
    """``[solve(k) for k in range(n_tasks)]``, in ``threads`` joblib threads when more than one;
    ``done(k)`` is called as each result arrives (in order), to report progress."""
    if threads == 1 or n_tasks == 1:
        results = (solve(k) for k in range(n_tasks))
    else:
        results = Parallel(n_jobs=threads, prefer="threads", return_as="generator")(
            delayed(solve)(k) for k in range(n_tasks)
        )
    out = []
    for k, result in enumerate(results):
        out.append(result)
        if done is not None:
            done(k)
    return out


def log_problem_groups(name: str, bounds: np.ndarray) -> Callable[[int], None] | None:
    """A ``done`` of :func:`map_tasks` over the problem groups ``bounds``: one INFO line per
    trained group ("PmSVM: problems 1-16 of 102 trained, 12.3 s"); None for a single group."""
    if len(bounds) <= 2:
        return None
    start, total = time.perf_counter(), int(bounds[-1])

    def done(group: int) -> None:
        _log.info(
            "%s: problems %d-%d of %d trained, %.1f s",
            name,
            bounds[group] + 1,
            bounds[group + 1],
            total,
            time.perf_counter() - start,
        )

    return done
