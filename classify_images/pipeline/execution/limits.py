"""Resource limits: no option may ask for more workers, threads or grid points than the machine can run.

Every count of parallel workers a user gives — ``--n-jobs``, ``--threads``, ``--cluster local:N``,
the ``n_jobs`` of a classifier (``--param n_jobs=``, ``--search n_jobs=``) — is bounded by the
cores this process may use (:func:`usable_cores`: the CPU affinity mask and the container's CPU
quota, as :func:`joblib.cpu_count` reads them), checked before any work:

* an option's count above that is **clamped** to it, with one warning line (more workers than
  cores only adds memory — each process holds its own copy of the model and the images' buffers —
  and switching: ``predict --n-jobs 32`` on two cores started 35 processes holding 2.2 GB);
* a classifier's ``n_jobs`` above it is **refused** in one line (it is a parameter recorded in
  the model and in the run: a silent change would make the record lie);
* a negative count means "all cores but ``-n_jobs - 1``" (joblib's rule), and is clamped to one
  worker when it asks for fewer;
* ``--batch-size`` (images per task) is clamped to :data:`MAX_BATCH_SIZE`;
* a ``--search`` grid has at most :data:`MAX_SEARCH_POINTS` points (the product of its value
  counts, computed before any point is made; each point is a cross-validated fit).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

from ...classifiers.registry import MAX_SEARCH_POINTS
from ...errors import ClassifyImagesError

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_SEARCH_POINTS",
    "ResourceLimitError",
    "usable_cores",
    "bounded_workers",
    "check_worker_parameter",
    "check_grid_size",
]

#: Images per task of a build on a cluster (``--batch-size``): more would hold that many images'
#: descriptors in one worker at once for no gain in scheduling (the default is 64).
MAX_BATCH_SIZE = 10_000


class ResourceLimitError(ClassifyImagesError, ValueError):
    """A count of workers or grid points beyond what the machine can run (one line)."""


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity mask and its container's CPU quota."""
    from joblib import cpu_count

    return max(1, int(cpu_count()))


def bounded_workers(n: int, option: str) -> int:
    """``n`` workers (``option`` names them for the warning), within ``1 … usable_cores()``.

    Positive counts above the cores, and negative ones asking for fewer than one worker, are
    clamped with one warning line; ``-1`` (all cores) and every count within bounds are returned
    unchanged; 0 is returned unchanged for the caller's own refusal.
    """
    cores = usable_cores()
    if n > cores:
        warnings.warn(f"{option} {n} is more than the {cores} cores this process may use: using {cores}", stacklevel=2)
        return cores
    if n < 0 and cores + 1 + n < 1:
        warnings.warn(f"{option} {n} leaves no core of the {cores} this process may use: using 1", stacklevel=2)
        return 1
    return n


def check_worker_parameter(option: str, name: str, value: object) -> None:
    """Refuse a classifier's ``n_jobs`` (given as ``option name=value``) above the usable cores."""
    if name != "n_jobs" or isinstance(value, bool) or not isinstance(value, int):
        return
    cores = usable_cores()
    if value > cores or (value < 0 and cores + 1 + value < 1):
        raise ResourceLimitError(
            f"{option} n_jobs={value}: this process may use {cores} cores; give 1 to {cores} (or -1: all of them)"
        )


def check_grid_size(grid: Mapping[str, Sequence], option: str = "--search") -> int:
    """The number of points of ``grid`` (the product of its value counts, nothing enumerated);
    :class:`ResourceLimitError` above :data:`MAX_SEARCH_POINTS`."""
    points = math.prod(len(values) for values in grid.values())
    if points > MAX_SEARCH_POINTS:
        counts = " × ".join(f"{len(values)} {name}" for name, values in sorted(grid.items()))
        raise ResourceLimitError(
            f"{option}: the grid has {points} points ({counts}); at most {MAX_SEARCH_POINTS} are searched "
            "(each is a cross-validated fit): give fewer values"
        )
    return points
