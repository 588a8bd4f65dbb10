"""Progress bars for long per-image stages (tqdm), or none."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["tqdm_progress"]

#: ``progress(iterable, desc, total=None)`` returns an iterable over the same items.
Progress = Callable[..., Iterable[Any]]


def tqdm_progress(enabled: bool) -> Progress:
    """A ``progress(iterable, desc, total=None)`` callable: a tqdm bar if ``enabled``, else the iterable itself."""

    def progress(iterable: Iterable[Any], desc: str, total: int | None = None) -> Iterable[Any]:
        if not enabled:
            return iterable
        from tqdm import tqdm

        return tqdm(iterable, desc=desc, total=total, unit="img", dynamic_ncols=True, leave=False)

    return progress
