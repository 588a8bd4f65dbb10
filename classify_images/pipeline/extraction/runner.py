"""Where the work runs: joblib workers here, or Dask tasks on a cluster.

:class:`Execution` is the choice, resolved once from ``--n-jobs`` / ``--scheduler`` /
``--cluster`` / ``--batch-size`` (:meth:`Execution.from_options`) and handed to whatever runs
work: the feature-set build, :class:`~.image_features.ImageFeatures`, the training, experiment
and prediction functions of :mod:`.workflows`.  :meth:`Execution.runner` opens it (a Dask
client while the block runs) as a :class:`Runner`, to which the build and the transformer
hand :func:`joblib.delayed` calls, receiving the results by index, with a progress bar that
counts images.

Worker processes exit when the process that started them dies (:func:`die_with_parent`, their
initializer): a ``kill -9`` of ``build-features --n-jobs 2`` leaves no worker decoding images
for nobody.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from joblib import Parallel

from ..execution.cluster import ClusterSpec, iter_tasks, open_client, parse_cluster_option, scheduler_errors
from ..execution.limits import bounded_workers
from ..settings.defaults import DEFAULT_BATCH_SIZE
from .stages import StageCache

__all__ = ["DEFAULT_BATCH_SIZE", "Execution", "Progress", "Runner", "no_progress"]

#: How often a worker looks whether its parent process is still there (seconds).
PARENT_POLL_SECONDS = 1.0


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    os._exit(1)


def die_with_parent() -> None:
    """Initializer of the joblib worker processes: exit when the parent process dies.

    On Linux the kernel sends ``SIGKILL`` at once (``prctl(PR_SET_PDEATHSIG)``); everywhere a
    daemon thread also polls ``os.getppid()`` every :data:`PARENT_POLL_SECONDS` and exits when
    the worker has been re-parented (the kernel's signal follows the *thread* that started the
    worker; the poll follows the process).  Without this, workers of a killed command stayed
    alive, holding memory and the machine's cores.
    """
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent or parent == 1:  # died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="die-with-parent", daemon=True).start()


#: A progress wrapper: ``progress(iterable, description, total)`` yields the items of ``iterable``.
Progress = Callable[[Iterable, str, int], Iterable]

_log = logging.getLogger(__name__)


def no_progress(iterable: Iterable, description: str, total: int) -> Iterable:
    """The :data:`Progress` that shows nothing."""
    return iterable


@dataclass(frozen=True)
class Execution:
    """Where per-image work and training run: ``n_jobs`` joblib workers on this machine, or a
    Dask cluster (``cluster``) in tasks of ``batch_size`` images.

    The numbers do not depend on it (every row is the same function of its image and the
    codebook; :mod:`~classify_images.pipeline.execution.cluster`).
    """

    #: joblib workers on this machine (-1: all cores); not used on a cluster
    n_jobs: int = 1
    #: the Dask cluster, or None for this machine
    cluster: ClusterSpec | None = None
    #: images per Dask task, rows per shard of a sharded store
    batch_size: int = DEFAULT_BATCH_SIZE

    def __post_init__(self) -> None:
        # more workers than cores only adds processes and memory (execution.limits): clamped
        object.__setattr__(self, "n_jobs", bounded_workers(self.n_jobs, "n_jobs"))
        if self.cluster is not None and self.cluster.n_workers is not None:
            workers = bounded_workers(self.cluster.n_workers, "local cluster workers")
            object.__setattr__(self, "cluster", dataclasses.replace(self.cluster, n_workers=workers))

    @classmethod
    def from_options(
        cls, *, n_jobs: int = 1, scheduler: str | None = None, cluster: str | None = None, batch_size: int | None = None
    ) -> Execution:
        """From the command line's options (``--scheduler tcp://HOST:PORT`` or ``--cluster local:N``).

        Raises
        ------
        ClusterError
            Both or a malformed one of ``scheduler`` / ``cluster``.
        ValueError
            ``batch_size`` below 1.
        """
        batch_size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        return cls(n_jobs, parse_cluster_option(scheduler, cluster), batch_size)

    @contextlib.contextmanager
    def client(self) -> Iterator[Any]:
        """The Dask client of :attr:`cluster` while the block runs (None on this machine)."""
        if self.cluster is None:
            yield None
            return
        with open_client(self.cluster) as client:
            yield client

    @contextlib.contextmanager
    def runner(self, cache: StageCache, progress: Progress | None = None, *, cached: bool = True) -> Iterator[Runner]:
        """A :class:`Runner` on this execution while the block runs; on a cluster, losing the
        scheduler is one :class:`~classify_images.pipeline.execution.cluster.ClusterError` line
        (``cached``: the message says a re-run resumes from the stage cache)."""
        progress = progress or no_progress
        if self.cluster is None:
            yield Runner(self.n_jobs, cache, progress, None, self.batch_size)
            return
        with self.client() as client, scheduler_errors(self.cluster, cached=cached):
            yield Runner(self.n_jobs, cache, progress, client, self.batch_size)


def _closed_quietly(results: Iterator) -> Iterator:
    """``results`` (joblib's generator of a pool's results), closed without joblib's warning about
    tasks computed and not used when the reader stops early (a build stopped by an error: the
    error is what the user reads)."""
    try:
        # Not ``yield from``: it would close ``results`` (and joblib would warn) before ``finally``.
        for result in results:  # noqa: UP028
            yield result
    finally:
        with warnings.catch_warnings():
            # joblib's "N tasks have been successfully executed but not used", "N tasks which were
            # still being processed by the workers have been cancelled"
            warnings.filterwarnings("ignore", message=r"\d+ tasks (have been|which were)", category=UserWarning)
            results.close()


def _on_one_blas_thread(results: Iterator) -> Iterator:
    """``results`` read with the BLAS pool limited to one thread.

    Per-image work is many small products (an image's descriptors by the PCA basis, by the
    GMM's means): a second BLAS thread there mostly spins, waiting between them.  On
    Flowers-17's ``recommended`` encoding (2 cores) it took 1.8x the CPU for 11 % less wall
    time, and with another process on the machine it slowed both.  The parallelism of
    per-image stages is ``n_jobs`` processes, each on one BLAS thread (joblib's workers are
    limited the same way, to ``cores // n_jobs``); a step on the whole sample (the codebook)
    keeps every thread.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        yield from results


@dataclass
class Runner:
    """How per-image work runs: joblib workers on this machine or Dask tasks on a cluster
    (``client``), the stage cache, progress reporting.

    Tasks are :func:`joblib.delayed` calls; ``shared`` objects are added to the keywords of
    every call (scattered once to the cluster's workers; joblib pickles them with each call,
    memory-mapping large arrays).
    """

    n_jobs: int
    cache: StageCache
    progress: Progress
    client: Any = None
    batch_size: int = DEFAULT_BATCH_SIZE

    # --- what the backend can do (asked by the build, not read off ``client``)
    @property
    def on_cluster(self) -> bool:
        """Tasks run on a Dask cluster: results can stay on the workers (futures), the workers
        read the files, and the client holds none of the work."""
        return self.client is not None

    @property
    def parallel_here(self) -> bool:
        """Several joblib worker processes on this machine: kernels compiled in this process
        (or aside, meanwhile) are loaded by the workers from numba's on-disk cache."""
        return self.client is None and self.n_jobs != 1

    def imap(
        self,
        tasks: list,
        description: str,
        *,
        shared: dict | None = None,
        batch_size: int | None = None,
        **parallel_options,
    ) -> Iterator[tuple[int, Any]]:
        """``(index, result)`` of each task, in completion order on a cluster, in order otherwise."""
        if self.on_cluster:
            return iter_tasks(self.client, tasks, description, batch_size=batch_size or self.batch_size, shared=shared)
        if shared:
            tasks = [(function, args, {**kwargs, **shared}) for function, args, kwargs in tasks]
        results = Parallel(n_jobs=self.n_jobs, return_as="generator", initializer=die_with_parent, **parallel_options)
        if self.n_jobs == 1:  # the tasks run here, as the generator is read
            return enumerate(_on_one_blas_thread(results(tasks)))
        return enumerate(_closed_quietly(results(tasks)))

    def map(self, tasks: list, description: str, *, sizes: list[int] | None = None, **options) -> list:
        """The results of ``tasks`` in order; the progress bar counts ``sizes[i]`` images for task ``i``."""
        results: list = [None] * len(tasks)
        for index, result in self.progress_of(
            self.imap(tasks, description, **options), description, sizes or len(tasks)
        ):
            results[index] = result
        return results

    def progress_of(self, pairs: Iterable[tuple[int, Any]], description: str, sizes: list[int] | int) -> Iterator:
        """``pairs`` through the progress bar, which advances by ``sizes[index]`` images per pair;
        the step logged at its start (INFO) and end (DEBUG, with its time)."""
        total = sizes if isinstance(sizes, int) else sum(sizes)
        _log.info("%s: %d images", description, total)
        start = time.perf_counter()
        yield from self._progress_of(pairs, description, sizes)
        _log.debug("%s: %d images in %.1f s", description, total, time.perf_counter() - start)

    def _progress_of(self, pairs: Iterable[tuple[int, Any]], description: str, sizes: list[int] | int) -> Iterator:
        if isinstance(sizes, int):
            yield from self.progress(pairs, description, sizes)
            return
        held: list = []

        def ticks() -> Iterator[None]:
            for pair in pairs:
                held.append(pair)
                yield from (None for _ in range(sizes[pair[0]]))

        for _ in self.progress(ticks(), description, sum(sizes)):
            while held:
                yield held.pop()
