"""What classify-images says while it works: the ``logging`` set-up of the package.

Library code logs through the :mod:`logging` module, one logger per module
(``logging.getLogger(__name__)``, all under the ``classify_images`` logger), and never
prints.  As the logging HOWTO asks of a library [1]_, the package logger holds only a
:class:`~logging.NullHandler`: nothing is shown until someone configures handlers.

Who configures them:

* the command line (:func:`cli_logging`): steps (INFO) on stderr by default, warnings
  and errors only with ``-q``, details with their times (DEBUG) with ``-v``;
* a Python call given ``verbose=True`` (:func:`verbose_output`, as scikit-learn's
  ``verbose``): the package's INFO records (DEBUG with ``verbose=2``) on stderr while
  the call runs — through the caller's own handlers when logging is configured;
* the user, with :func:`logging.basicConfig` or handlers on ``"classify_images"``.

Steps that run inside one library call of their own (scikit-learn's k-means and EM,
SPAMS' dictionary learning) report through :func:`step_progress`: a line every
:data:`HEARTBEAT_SECONDS` with the latest iteration the library printed (its
``verbose`` output, turned into DEBUG records), from a thread that only wakes up to log.

References
----------
.. [1] Python documentation, "Logging HOWTO", section "Configuring Logging for a Library".
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator

__all__ = [
    "PACKAGE_LOGGER",
    "HEARTBEAT_SECONDS",
    "cli_logging",
    "level_of",
    "verbose_output",
    "step_progress",
    "fits_summarised",
    "fits_are_summarised",
]

#: The logger every module of the package logs under.
PACKAGE_LOGGER = "classify_images"
#: Seconds between two progress lines of a step that runs inside one library call.
HEARTBEAT_SECONDS = 10.0


def level_of(verbosity: int) -> int:
    """The level shown at ``verbosity``: -1 (``-q``) warnings, 0 the steps (INFO), ≥ 1 (``-v``) details (DEBUG)."""
    if verbosity < 0:
        return logging.WARNING
    return logging.INFO if verbosity == 0 else logging.DEBUG


class _StepFormatter(logging.Formatter):
    """``message`` for the steps; ``[  12.3 s] message`` (time since start) for details (``-v``);
    ``classify-images COMMAND: warning: message`` for warnings and errors."""

    def __init__(self, prefix: str, timed: bool) -> None:
        super().__init__()
        self.prefix, self.timed, self.start = prefix, timed, time.perf_counter()

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"{self.prefix}: {record.levelname.lower()}: {message}"
        if self.timed:
            return f"[{time.perf_counter() - self.start:7.1f} s] {message}"
        return message


class _StderrHandler(logging.StreamHandler):
    """The handler this module puts on the package logger (one at a time: calls nest)."""


@contextlib.contextmanager
def _handler_on_package(level: int, formatter: logging.Formatter) -> Iterator[None]:
    """A stderr handler on the package logger, at ``level``, while the block runs."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(formatter)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def cli_logging(verbosity: int, command: str) -> contextlib.AbstractContextManager:
    """The command line's logging while ``command`` runs: records of ``level_of(verbosity)`` and
    above on stderr (stdout keeps the command's results)."""
    return _handler_on_package(level_of(verbosity), _StepFormatter(f"classify-images {command}", timed=verbosity > 0))


@contextlib.contextmanager
def verbose_output(verbose: int | bool) -> Iterator[bool]:
    """While a Python call runs with ``verbose`` (scikit-learn's convention): the package's steps
    (``verbose=True`` or 1: INFO; ≥ 2: DEBUG) on stderr; yields whether progress bars are
    wanted (``bool(verbose)``).

    The records still reach the handlers the caller configured (which may show them a second
    time: callers who configure logging themselves can leave ``verbose`` off and set the
    ``classify_images`` logger's level instead).  Inside the command line or another verbose
    call, whose handler is already there, nothing is added.  ``verbose=False`` changes
    nothing: the records go wherever the caller's logging sends them (nowhere by default).
    """
    logger = logging.getLogger(PACKAGE_LOGGER)
    if not verbose or any(isinstance(h, _StderrHandler) for h in logger.handlers):
        yield bool(verbose)
        return
    level = logging.INFO if int(verbose) < 2 else logging.DEBUG
    with _handler_on_package(level, _StepFormatter("classify-images", timed=level == logging.DEBUG)):
        yield True


class _LinesToLog(io.TextIOBase):
    """A text stream whose lines become DEBUG records of ``progress`` (a library's ``verbose`` prints)."""

    def __init__(self, progress: _StepProgress) -> None:
        self.progress, self.pending = progress, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            if line.strip():
                self.progress.note(line.strip())
        return len(text)


class _StepProgress:
    """The latest news of a long step and the thread that logs it every ``interval`` seconds; with
    ``total`` iterations at most, the news lines that start with "Iteration" are counted and the
    time left estimated from the mean time of those done."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        interval: float,
        total: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.logger, self.what, self.interval, self.total, self.clock = logger, what, interval, total, clock
        self.latest = ""
        self.iterations = 0  # "Iteration" lines seen
        self.first_iteration_at: float | None = None  # when the first one came (the phases before it differ)
        self.start = clock()
        self.done = threading.Event()

    def note(self, text: str) -> None:
        self.latest = text
        if text.startswith("Iteration"):
            self.iterations += 1
            if self.first_iteration_at is None:
                self.first_iteration_at = self.clock()
        self.logger.debug("%s: %s", self.what, text)

    def status(self) -> str:
        """``[news, ]N s so far[, at most ~M s left (I of at most T iterations done)]``: the time left
        from the mean time of the iterations since the first (an upper bound: it may converge sooner)."""
        now = self.clock()
        news = f"{self.latest.rstrip('.')}, " if self.latest else ""  # (scikit-learn's lines end with a full stop)
        text = f"{news}{now - self.start:.0f} s so far"
        if self.total and self.first_iteration_at is not None and 2 <= self.iterations < self.total:
            per_iteration = (now - self.first_iteration_at) / (self.iterations - 1)
            left = per_iteration * (self.total - self.iterations)
            text += f", at most ~{left:.0f} s left ({self.iterations} of at most {self.total} iterations done)"
        return text

    def beat(self) -> None:
        while not self.done.wait(self.interval):
            self.logger.info("%s: %s", self.what, self.status())


@contextlib.contextmanager
def step_progress(
    logger: logging.Logger,
    what: str,
    *,
    capture_stdout: bool = False,
    interval: float | None = None,
    total_iterations: int | None = None,
) -> Iterator[bool]:
    """Progress of a step that runs inside one library call, while the block runs.

    Every ``interval`` seconds (:data:`HEARTBEAT_SECONDS`) an INFO record "``what``: <latest
    news>, N s so far", from a daemon thread (the library must release the GIL, as NumPy,
    scikit-learn's Cython loops and SPAMS do); with ``capture_stdout``, what the library prints
    (its ``verbose`` output) becomes DEBUG records and the latest line is the news.  A DEBUG
    record gives the step's time at the end.  Yields whether the step should ask the library
    to be verbose: only when ``logger`` shows INFO records (nothing is captured or started
    otherwise, so a quiet call costs nothing).

    ``capture_stdout`` replaces ``sys.stdout`` of the whole process while the block runs: use
    it only around a call in the main thread that nothing else prints during.

    ``total_iterations``: the most iterations the library runs; each news line starting with
    "Iteration" counts one, and the heartbeat adds an estimate of the time left (an upper bound:
    the library may converge sooner).
    """
    if not logger.isEnabledFor(logging.INFO):
        yield False
        return
    progress = _StepProgress(logger, what, HEARTBEAT_SECONDS if interval is None else interval, total_iterations)
    thread = threading.Thread(target=progress.beat, name=f"progress of {what}", daemon=True)
    thread.start()
    redirect = contextlib.redirect_stdout(_LinesToLog(progress)) if capture_stdout else contextlib.nullcontext()
    try:
        with redirect:
            yield True
    finally:
        progress.done.set()
        thread.join()
        logger.debug("%s: done in %.1f s", what, time.perf_counter() - progress.start)


#: Depth of :func:`fits_summarised` blocks in this process: inside one, each fit logs at DEBUG.
_summarised_depth = 0


@contextlib.contextmanager
def fits_summarised(summary: str, *args: object) -> Iterator[None]:
    """A block of many fits (a cross-validated search, a calibration's folds) logged as the one INFO
    line ``summary % args``; each fit's own line ("training P one-vs-rest problems on n rows …",
    :func:`fits_are_summarised`) goes to DEBUG (``-v``) instead of repeating once per fold and value."""
    global _summarised_depth
    logging.getLogger(PACKAGE_LOGGER).info(summary, *args)
    _summarised_depth += 1
    try:
        yield
    finally:
        _summarised_depth -= 1


def fits_are_summarised() -> bool:
    """Whether a :func:`fits_summarised` block is running (a fit then logs its line at DEBUG)."""
    return _summarised_depth > 0
