"""The number of threads the coding kernels run on."""

from __future__ import annotations

import os


def default_threads() -> int:
    """The cores this process may run on (the thread count changes no number)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
