"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file the pipeline writes for users (feature-set manifests, model files, reports,
plots, the demo's images) goes through :func:`atomic_write`: the content is written to a
temporary name in the destination folder and renamed over the destination with
:func:`os.replace`, which POSIX makes atomic within one file system.  An interrupted run
leaves at most a stray ``.<name>.<pid>.tmp`` file, never a truncated destination.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "atomic_write_json"]


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success rename it over ``path``.

    Parameters
    ----------
    path : path-like
        Destination.  Its folder is created if needed.
    mode : {"wb", "w"}
        Binary or text.
    encoding : str, optional
        Text encoding (``"utf-8"`` when ``mode="w"`` and none is given).

    Yields
    ------
    handle : file object
        Write the content to it.  If the block raises, the temporary file is removed and
        ``path`` is left as it was.

    Examples
    --------
    >>> with atomic_write("report.md", "w") as handle:   # doctest: +SKIP
    ...     handle.write(text)
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if mode == "w" and encoding is None:
        encoding = "utf-8"
    try:
        with open(tmp, mode, encoding=encoding) as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_json(path: str | os.PathLike, payload: Any) -> None:
    """Write ``payload`` as indented UTF-8 JSON to ``path`` through :func:`atomic_write`."""
    with atomic_write(path, "w") as handle:
        handle.write(json.dumps(payload, indent=2) + "\n")
