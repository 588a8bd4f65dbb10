"""Scheduler-side counters of a Dask build: tasks, their compute time, bytes moved.

Loaded into the scheduler as a *preload* module (``dask.config`` key
``distributed.scheduler.preload``, or ``dask scheduler --preload _cluster_metrics``):
:func:`dask_setup` registers :class:`BuildMetrics`, which counts

* ``tasks``: tasks that finished (reached ``memory`` or ``erred``), and the sum of their
  compute seconds (the workers' ``startstops`` of action ``compute``); the same per task
  name (``task_prefixes``: check-images, sample-descriptors, encode-pool, …) with the
  span from its first compute start to its last compute stop, whose ratio is that step's
  throughput in tasks/s;
* ``graph_bytes``: bytes of the task graphs the clients submitted (frames of each
  ``update-graph`` message: function, arguments, keys);
* ``scheduler_to_worker_bytes``: bytes the scheduler wrote on its batched streams to the
  workers (``compute-task`` messages carry each task's specification);
* ``result_bytes``: ``nbytes`` of every result (what a client gathers, or a worker fetches
  from another).

Bytes the workers send back on their own streams (``task-finished`` messages: keys and
metadata, no data) are not counted.  With a ``LocalCluster`` the scheduler runs in the
client's process, so :data:`METRICS` is readable there after the build.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

#: The counters of the last scheduler started in this process (reset by :func:`dask_setup`).
METRICS: dict[str, Any] = {}
_LOCK = threading.Lock()


def _reset() -> None:
    METRICS.clear()
    METRICS.update(
        tasks=0,
        erred=0,
        compute_seconds=0.0,
        first_start=None,
        last_stop=None,
        graph_bytes=0,
        result_bytes=0,
        scheduler_to_worker_bytes=0,
        workers=0,
        task_prefixes={},
    )


_reset()


def _prefix(key) -> str:
    """The task's name without its token and index (``encode-pool-1a2b3c4d-17`` → ``encode-pool``)."""
    parts = str(key[0] if isinstance(key, tuple) else key).split("-")
    while len(parts) > 1 and (parts[-1].isdigit() or all(c in "0123456789abcdef" for c in parts[-1])):
        parts.pop()
    return "-".join(parts)


class BuildMetrics(SchedulerPlugin):
    """The scheduler plugin that fills :data:`METRICS`."""

    name = "classify-images-build-metrics"

    def __init__(self) -> None:
        self._streams: list[Any] = []
        self._scheduler = None

    async def start(self, scheduler) -> None:
        self._scheduler = scheduler
        handler = scheduler.stream_handlers["update-graph"]

        async def counting_update_graph(**message):
            serialised = message.get("expr_ser") or message.get("graph_frames")
            frames = getattr(serialised, "frames", serialised) or []
            with _LOCK:
                METRICS["graph_bytes"] += sum(memoryview(frame).nbytes for frame in frames)
            result = handler(**message)
            return await result if inspect.isawaitable(result) else result

        scheduler.stream_handlers["update-graph"] = counting_update_graph

    def add_worker(self, scheduler, worker: str) -> None:
        stream = scheduler.stream_comms.get(worker)
        if stream is not None:
            self._streams.append(stream)
        METRICS["workers"] = max(METRICS["workers"], len(scheduler.workers))
        self._count_streams()

    def remove_worker(self, scheduler, worker: str, **kwargs) -> None:
        self._count_streams()

    def _count_streams(self) -> None:
        METRICS["scheduler_to_worker_bytes"] = sum(stream.byte_count for stream in self._streams)

    def transition(self, key, start: str, finish: str, *args, **kwargs) -> None:
        if finish not in ("memory", "erred") or start != "processing":
            return
        with _LOCK:
            METRICS["tasks"] += 1
            METRICS["erred"] += finish == "erred"
            METRICS["result_bytes"] += int(kwargs.get("nbytes") or 0)
            group = METRICS["task_prefixes"].setdefault(
                _prefix(key), {"tasks": 0, "compute_seconds": 0.0, "first_start": None, "last_stop": None}
            )
            group["tasks"] += 1
            for interval in kwargs.get("startstops") or ():
                if interval.get("action") != "compute":
                    continue
                METRICS["compute_seconds"] += interval["stop"] - interval["start"]
                group["compute_seconds"] += interval["stop"] - interval["start"]
                group["first_start"] = min(group["first_start"] or interval["start"], interval["start"])
                group["last_stop"] = max(group["last_stop"] or interval["stop"], interval["stop"])
                first = METRICS["first_start"]
                METRICS["first_start"] = interval["start"] if first is None else min(first, interval["start"])
                last = METRICS["last_stop"]
                METRICS["last_stop"] = interval["stop"] if last is None else max(last, interval["stop"])
        self._count_streams()

    async def close(self) -> None:
        self._count_streams()


def dask_setup(scheduler) -> None:
    """Preload hook: reset the counters and register the plugin on this scheduler."""
    _reset()
    scheduler.add_plugin(BuildMetrics())


def snapshot() -> dict[str, Any]:
    """A copy of the counters, with the throughput (tasks/s over the compute span)."""
    with _LOCK:
        metrics = dict(METRICS, task_prefixes={k: dict(v) for k, v in METRICS["task_prefixes"].items()})
    for group in metrics["task_prefixes"].values():  # throughput of each step while it ran
        span = (group.pop("last_stop") or 0.0) - (group.pop("first_start") or 0.0)
        group["span_seconds"] = round(span, 3)
        group["compute_seconds"] = round(group["compute_seconds"], 3)
        group["tasks_per_second"] = round(group["tasks"] / span, 2) if span > 0 else None
    span = (metrics["last_stop"] or 0.0) - (metrics["first_start"] or 0.0)
    metrics["compute_span_seconds"] = round(span, 3)
    metrics["tasks_per_second"] = round(metrics["tasks"] / span, 3) if span > 0 else None
    return metrics
