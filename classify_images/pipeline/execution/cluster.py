"""Where the per-image stages and the training run: this machine (joblib), or a Dask cluster.

Two command-line options name a cluster (``build-features``, ``experiment``, ``predict``,
``train``):

* ``--scheduler tcp://HOST:PORT`` — a running Dask scheduler (``dask scheduler`` on one
  machine, ``dask worker tcp://HOST:PORT`` on each worker machine);
* ``--cluster local:N`` — a :class:`distributed.LocalCluster` of ``N`` worker processes
  on this machine, one thread each, started for the command and stopped after it.

With neither, nothing changes: the work runs in joblib's process pool, as it always did,
and Dask is not imported.  Dask's ``distributed`` scheduler is an optional dependency
(``pip install 'classify-images[distributed]'``): this module imports it inside
:func:`open_client` only, so ``import classify_images`` and every path without a cluster
work without it, and asking for a cluster without it is a one-line :class:`ClusterError`.

Every failure to reach or keep the cluster is a :class:`ClusterError` of one line naming
the option and what to do (the command line prints it and exits with status 2).

References
----------
.. [1] M. Rocklin, "Dask: parallel computation with blocked algorithms and task
   scheduling", Proc. 14th Python in Science Conference, 2015.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import ClassifyImagesError

__all__ = [
    "ClusterError",
    "ClusterSpec",
    "parse_cluster_option",
    "open_client",
    "require_distributed",
    "scheduler_errors",
    "iter_tasks",
    "run_tasks",
    "share",
    "submit_kept",
    "iter_kept",
    "INSTALL_HINT",
    "dashboard_text",
]

#: What to run to get the optional dependency.
INSTALL_HINT = "pip install 'classify-images[distributed]'"
#: Seconds to wait for a scheduler to answer, and for a first worker to join it.
DEFAULT_CONNECT_TIMEOUT = 10.0

_SCHEDULER_PATTERN = re.compile(r"(?:(?P<scheme>tcp|tls)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(?P<port>\d+)/?")
_CLUSTER_PATTERN = re.compile(r"local:(?P<n>\d+)")
_log = logging.getLogger(__name__)


class ClusterError(ClassifyImagesError, ValueError):
    """The cluster cannot be used: bad option, Dask missing, scheduler unreachable or lost (one line)."""


@dataclass(frozen=True)
class ClusterSpec:
    """Where to run: a running scheduler (``address``) or a local cluster of ``n_workers`` processes.

    Exactly one of the two is set.
    """

    address: str | None = None
    n_workers: int | None = None

    @property
    def is_local(self) -> bool:
        """Whether the cluster is started on this machine for the command (``--cluster local:N``)."""
        return self.n_workers is not None

    @property
    def option(self) -> str:
        """The command-line option this spec came from, for messages (``--scheduler tcp://…``)."""
        return f"--cluster local:{self.n_workers}" if self.is_local else f"--scheduler {self.address}"

    def __str__(self) -> str:
        if self.is_local:
            return f"a local Dask cluster of {self.n_workers} worker process(es)"
        return f"the Dask scheduler at {self.address}"


def parse_cluster_option(scheduler: str | None, cluster: str | None) -> ClusterSpec | None:
    """The :class:`ClusterSpec` of ``--scheduler`` / ``--cluster``, or None when neither is given.

    Parameters
    ----------
    scheduler : str or None
        ``tcp://HOST:PORT`` (also ``tls://HOST:PORT``, or ``HOST:PORT`` meaning tcp).
    cluster : str or None
        ``local:N``, N ≥ 1 worker processes on this machine.

    Raises
    ------
    ClusterError
        Both given, or a value of the wrong form.  (Dask need not be installed to parse.)
    """
    if scheduler is not None and cluster is not None:
        raise ClusterError("give either --scheduler (a running cluster) or --cluster (a local one), not both")
    if scheduler is not None:
        match = _SCHEDULER_PATTERN.fullmatch(scheduler.strip())
        if match is None or not 1 <= int(match["port"]) <= 65535:
            raise ClusterError(
                f"--scheduler {scheduler!r} is not a scheduler address; give tcp://HOST:PORT "
                "(the address 'dask scheduler' prints, port 8786 by default)"
            )
        return ClusterSpec(address=f"{match['scheme'] or 'tcp'}://{match['host']}:{int(match['port'])}")
    if cluster is not None:
        match = _CLUSTER_PATTERN.fullmatch(cluster.strip())
        if match is None or int(match["n"]) < 1:
            raise ClusterError(
                f"--cluster {cluster!r} is not understood; give local:N with N ≥ 1 worker processes (e.g. local:2)"
            )
        return ClusterSpec(n_workers=int(match["n"]))
    return None


def require_distributed():
    """The ``distributed`` module, or a one-line :class:`ClusterError` saying what to install."""
    try:
        return importlib.import_module("distributed")
    except ImportError as exc:
        raise ClusterError(
            f"a Dask cluster needs Dask's distributed scheduler, which is not installed "
            f"({exc.name or 'distributed'} is missing): {INSTALL_HINT}"
        ) from None


def _first_line(exc: BaseException) -> str:
    try:
        text = str(exc).strip()
    except Exception:
        text = ""
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.contextmanager
def open_client(spec: ClusterSpec, *, timeout: float | None = None) -> Iterator[distributed.Client]:  # noqa: F821
    """A :class:`distributed.Client` on the cluster ``spec`` names, closed on exit.

    ``--cluster local:N`` starts a :class:`distributed.LocalCluster` (``N`` worker processes,
    one thread each, listening on the loopback interface, its dashboard on a free port, the
    workers' profiler off) and stops it on exit.
    ``--scheduler`` connects to a running scheduler within ``timeout`` seconds (default
    :data:`DEFAULT_CONNECT_TIMEOUT`) and waits as long again for at least one worker.

    Raises
    ------
    ClusterError
        ``distributed`` is not installed; the scheduler does not answer; it has no worker.
    """
    distributed = require_distributed()
    import dask  # (installed with distributed)

    timeout = DEFAULT_CONNECT_TIMEOUT if timeout is None else timeout
    with _quiet_dask_logs(), contextlib.ExitStack() as stack:
        if spec.is_local:
            try:
                # The workers' statistical profiler (a stack sample every 10 ms, kept per second for
                # the last 1 000 s) is for a dashboard nobody opens on a cluster started for one
                # command; it is what made a worker's memory grow with the build's duration.
                stack.enter_context(dask.config.set({"distributed.worker.profile.enabled": False}))
                cluster = stack.enter_context(
                    distributed.LocalCluster(
                        n_workers=spec.n_workers,
                        threads_per_worker=1,
                        processes=True,
                        host="127.0.0.1",
                        dashboard_address=":0",
                        silence_logs=logging.ERROR,
                    )
                )
            except (OSError, RuntimeError, TimeoutError) as exc:
                raise ClusterError(
                    f"cannot start {spec} ({_first_line(exc)}); try fewer workers, or run without --cluster"
                ) from None
            client = stack.enter_context(distributed.Client(cluster, set_as_default=False))
        else:
            try:
                client = distributed.Client(spec.address, timeout=timeout, set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise ClusterError(
                    f"cannot reach the Dask scheduler at {spec.address} ({_first_line(exc)}): start it "
                    "('dask scheduler') or correct --scheduler"
                ) from None
            stack.enter_context(client)
            try:
                client.wait_for_workers(1, timeout=timeout)
            except (OSError, TimeoutError):
                raise ClusterError(
                    f"the Dask scheduler at {spec.address} has no worker after {timeout:g} s: start some "
                    f"('dask worker {spec.address}' on each machine)"
                ) from None
        _log.info(dashboard_text(client))
        yield client


def dashboard_text(client: distributed.Client) -> str:  # noqa: F821
    """One line telling where the cluster's Dask dashboard is (or why there is none).

    The dashboard (task stream, worker memory, progress) is served by the scheduler with
    Bokeh, which the ``distributed`` extra installs; a local cluster's dashboard listens on a
    free port of the loopback interface, so its address is only known once it started.
    """
    if importlib.util.find_spec("bokeh") is None:
        return (
            "Dask dashboard: not available (Bokeh is not installed; "
            "it comes with the 'distributed' extra, or 'pip install bokeh')"
        )
    return f"Dask dashboard: {client.dashboard_link}"


@contextlib.contextmanager
def scheduler_errors(spec: ClusterSpec, *, cached: bool = True) -> Iterator[None]:
    """Losing the scheduler in the middle of a command: one :class:`ClusterError` line.

    What the workers finished is in the stage cache (they write it themselves), so the
    message says to re-run the same command, which resumes from there (``cached=False``:
    the command runs without a stage cache, and the message says a re-run starts again).
    """
    try:
        yield
    except ClusterError:
        raise
    except TimeoutError as exc:  # a call to the scheduler that no longer answers
        raise ClusterError(_lost(spec, exc, cached)) from None
    except Exception as exc:  # other OSErrors (a full disk, …) are not the cluster's: they propagate
        if _is_dask_comm_error(exc):
            raise ClusterError(_lost(spec, exc, cached)) from None
        if type(exc).__name__ == "KilledWorker" and (type(exc).__module__ or "").startswith("distributed"):
            raise ClusterError(_killed_worker(exc)) from None
        raise


def _killed_worker(exc: BaseException) -> str:
    return (
        f"a task failed because the workers running it died repeatedly ({_first_line(exc)}); "
        "check the workers' logs and memory (dask worker --memory-limit), then re-run the same command to resume"
    )


def _lost(spec: ClusterSpec, exc: BaseException, cached: bool = True) -> str:
    if not cached:
        return f"lost {spec} ({_first_line(exc)}); without a stage cache nothing was kept: re-run the command"
    return (
        f"lost {spec} ({_first_line(exc)}); the finished work is kept in the stage cache: "
        f"re-run the same command to resume"
    )


def _is_dask_comm_error(exc: BaseException) -> bool:
    """Whether ``exc`` is Dask's way of saying the scheduler went away (closed comm, cancelled futures)."""
    import concurrent.futures

    if isinstance(exc, concurrent.futures.CancelledError):
        return True
    module = type(exc).__module__ or ""
    return module.startswith("distributed") and type(exc).__name__ in (
        "CommClosedError",
        "FutureCancelledError",
        "CancelledError",
    )


@contextlib.contextmanager
def _quiet_dask_logs() -> Iterator[None]:
    """Dask's own loggers at ERROR while the client runs (its reconnect warnings are not ours to show)."""
    loggers = [
        logging.getLogger(name)
        for name in ("distributed", "distributed.client", "distributed.core", "distributed.comm", "distributed.batched")
    ]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


#: A call as :func:`joblib.delayed` makes it: ``(function, args, kwargs)``.
Call = tuple[Callable[..., Any], tuple, dict]


def _run_batch(calls: Sequence[Call], **shared: Any) -> list:
    """Run a batch of calls on a worker; ``shared`` (the shared objects) is added to every call's keywords."""
    return [function(*args, **{**kwargs, **shared}) for function, args, kwargs in calls]


def _the_value(value: Any) -> Any:
    return value


def share(client: distributed.Client, value: Any, description: str) -> distributed.Future:  # noqa: F821
    """A future holding ``value`` on the cluster, for tasks that all need it, which the cluster
    can recompute when the workers holding it die.

    ``value`` is sent to the scheduler once, inside a task that returns it; each worker then
    fetches the result once (from a peer) when its first task needs it, not with every task.
    Not :meth:`distributed.Client.scatter`: scattered data lives only on workers, and once
    every worker holding it has died (a task that kills its workers does that) the scheduler
    cancels every task that needs it — the build would end in a cancelled future (or hang),
    never in the one-line "workers died" error, and could not go on after a worker restart.
    """
    return client.submit(_the_value, value, key=_task_key(f"shared {description}"), pure=False)


def _task_key(description: str) -> str:
    """A unique task key that starts with ``description`` (lower case, dashes)."""
    return f"{re.sub(r'[^a-z0-9]+', '-', description.lower()).strip('-') or 'task'}-{uuid.uuid4().hex[:8]}"


def _batches(n_calls: int, batch_size: int) -> list[range]:
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    return [range(start, min(start + batch_size, n_calls)) for start in range(0, n_calls, batch_size)]


def submit_kept(
    client: distributed.Client,  # noqa: F821
    calls: Sequence[Call],
    description: str,
    *,
    batch_size: int,
) -> list[tuple[range, distributed.Future]]:  # noqa: F821
    """Submit ``calls`` as tasks of ``batch_size`` calls whose results stay on the workers.

    For results that a further task combines on the cluster (the descriptor sample, which
    the codebook task reads): :func:`iter_tasks` would bring every result to the client.
    Pass the futures, in order, to that task (``client.submit(f, [future, …])``: Dask hands
    it the lists of results, moved between workers, not through the client); follow their
    completion with :func:`iter_kept`.

    Returns
    -------
    list of (range, Future)
        The indices of the calls each task runs, and the task (its result: their results, in order).
    """
    require_distributed()
    prefix = _task_key(description)
    return [
        (batch, client.submit(_run_batch, [calls[k] for k in batch], key=f"{prefix}-{index}"))
        for index, batch in enumerate(_batches(len(calls), batch_size))
    ]


def iter_kept(client: distributed.Client, submitted: list[tuple[range, Any]]) -> Iterator[tuple[int, None]]:  # noqa: F821
    """``(index, None)`` for every call of :func:`submit_kept`'s tasks as its task completes
    (for a progress bar; the results stay on the workers).  A task that failed raises its
    exception here, and the tasks still running are cancelled."""
    distributed = require_distributed()
    batch_of = {future: batch for batch, future in submitted}
    try:
        for future in distributed.as_completed(list(batch_of), loop=client.loop):
            if future.status != "finished":
                future.result()  # raises the task's exception (or the cancellation of a lost scheduler)
            yield from ((index, None) for index in batch_of.pop(future))
    finally:
        if batch_of:
            with contextlib.suppress(Exception):
                client.cancel(list(batch_of))


def _no_progress(iterable: Iterable, description: str, total: int) -> Iterable:
    return iterable


def iter_tasks(
    client: distributed.Client,  # noqa: F821
    calls: Sequence[Call],
    description: str,
    *,
    batch_size: int,
    shared: dict[str, Any] | None = None,
    max_in_flight: int | None = None,
) -> Iterator[tuple[int, Any]]:
    """``(index, result)`` of each of ``calls``, computed as Dask tasks of ``batch_size`` calls
    each, yielded as the tasks complete (``distributed.as_completed``).

    Parameters
    ----------
    client : distributed.Client
        The cluster (:func:`open_client`).
    calls : sequence of (function, args, kwargs)
        The calls, as :func:`joblib.delayed` makes them (``delayed(f)(x, y=1)``); the
        functions must be importable on the workers (module-level).
    description : str
        Names the tasks (their keys start with it).
    batch_size : int
        Calls per task: enough that the scheduler's cost per task is small against the
        task's work (docs/benchmarks/cluster-and-scale.md, "Dask scheduler overhead per task").
    shared : dict, optional
        Objects every call needs as keyword arguments (the codebook, the extractor): sent to
        each worker once (:func:`share`), not with every task.
    max_in_flight : int, optional
        Tasks submitted and not yet collected (default: four per worker thread, at least 8):
        the client and the scheduler hold a bounded number of tasks and results whatever
        the number of calls.

    Yields
    ------
    index, result
        ``result = function(*args, **kwargs, **shared)`` of ``calls[index]``.  When a call
        raises, its exception propagates here and the tasks still running are cancelled.
    """
    distributed = require_distributed()
    batches = _batches(len(calls), batch_size)
    shared_futures = {name: share(client, value, f"{description}-{name}") for name, value in (shared or {}).items()}
    if max_in_flight is None:
        max_in_flight = max(8, 4 * sum(client.nthreads().values()))
    prefix = _task_key(description)
    waiting = iter(range(len(batches)))
    in_flight: dict = {}
    completed = distributed.as_completed(loop=client.loop)

    def submit_next() -> None:
        index = next(waiting, None)
        if index is not None:
            batch = [calls[k] for k in batches[index]]
            future = client.submit(_run_batch, batch, key=f"{prefix}-{index}", **shared_futures)
            in_flight[future] = index
            completed.add(future)

    try:
        for _ in range(max_in_flight):
            submit_next()
        for future in completed:
            index = in_flight.pop(future)
            results = future.result()
            del future  # the worker may drop the result now
            submit_next()
            yield from zip(batches[index], results)
    finally:
        if in_flight:  # an error, or the consumer stopped: the rest is not needed
            with contextlib.suppress(Exception):
                client.cancel(list(in_flight))


def run_tasks(
    client: distributed.Client,  # noqa: F821
    calls: Sequence[Call],
    description: str,
    *,
    batch_size: int,
    shared: dict[str, Any] | None = None,
    progress: Callable[[Iterable, str, int], Iterable] = _no_progress,
) -> list:
    """The results of ``calls`` in order (:func:`iter_tasks`), with a progress bar
    ``progress(iterable, description, total)`` that advances as the tasks complete."""
    results: list = [None] * len(calls)
    for index, result in progress(
        iter_tasks(client, calls, description, batch_size=batch_size, shared=shared), description, len(calls)
    ):
        results[index] = result
    return results
