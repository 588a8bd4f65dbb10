"""Progress bars for long per-image stages (tqdm), or none.

The bars go to stderr, and only to a terminal (tqdm's ``disable=None``): a log file or a pipe
gets the steps' log lines (:meth:`~classify_images.pipeline.extraction.runner.Runner.progress_of`), not
the bars' carriage returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["tqdm_progress"]

#: ``progress(iterable, desc, total=None)`` returns an iterable over the same items.
Progress = Callable[..., Iterable[Any]]


def tqdm_progress(enabled: bool) -> Progress:
    """A ``progress(iterable, desc, total=None)`` callable: a tqdm bar on stderr if ``enabled`` and
    stderr is a terminal, else the iterable itself."""

    def progress(iterable: Iterable[Any], desc: str, total: int | None = None) -> Iterable[Any]:
        if not enabled:
            return iterable
        from tqdm import tqdm

        return tqdm(iterable, desc=desc, total=total, unit="img", dynamic_ncols=True, leave=False, disable=None)

    return progress
