"""How the per-image work of a build runs: joblib workers here, or Dask tasks on a cluster.

:class:`Runner` is shared by the feature-set build (:mod:`.build`) and the scikit-learn
transformer :class:`~.image_features.ImageFeatures`: both hand it :func:`joblib.delayed`
calls and receive the results by index, with a progress bar that counts images.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from joblib import Parallel

from .cluster import iter_tasks
from .stages import StageCache

__all__ = ["DEFAULT_BATCH_SIZE", "Progress", "Runner", "no_progress"]

#: A progress wrapper: ``progress(iterable, description, total)`` yields the items of ``iterable``.
Progress = Callable[[Iterable, str, int], Iterable]

#: Images per Dask task, and rows per shard of a sharded store: chosen from the scheduler's
#: cost per task against the cost of an image (docs/benchmarks/cluster-and-scale.md).
DEFAULT_BATCH_SIZE = 64


def no_progress(iterable: Iterable, description: str, total: int) -> Iterable:
    """The :data:`Progress` that shows nothing."""
    return iterable


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

    def imap(self, tasks: list, description: str, *, shared: dict | None = None, batch_size: int | None = None,
             **parallel_options) -> Iterator[tuple[int, Any]]:
        """``(index, result)`` of each task, in completion order on a cluster, in order otherwise."""
        if self.client is not None:
            return iter_tasks(self.client, tasks, description, batch_size=batch_size or self.batch_size, shared=shared)
        if shared:
            tasks = [(function, args, {**kwargs, **shared}) for function, args, kwargs in tasks]
        return enumerate(Parallel(n_jobs=self.n_jobs, return_as="generator", **parallel_options)(tasks))

    def map(self, tasks: list, description: str, *, sizes: list[int] | None = None, **options) -> list:
        """The results of ``tasks`` in order; the progress bar counts ``sizes[i]`` images for task ``i``."""
        results: list = [None] * len(tasks)
        for index, result in self.progress_of(self.imap(tasks, description, **options), description, sizes or len(tasks)):
            results[index] = result
        return results

    def progress_of(self, pairs: Iterable[tuple[int, Any]], description: str, sizes: list[int] | int) -> Iterator:
        """``pairs`` through the progress bar, which advances by ``sizes[index]`` images per pair."""
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
