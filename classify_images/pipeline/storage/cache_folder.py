"""The stage-cache folder as seen by its user: where it is, how big, and clearing it.

Where: ``$CLASSIFY_IMAGES_CACHE`` when set, else ``$XDG_CACHE_HOME/classify-images`` (the
XDG Base Directory convention), else ``~/.cache/classify-images``
(:func:`default_cache_dir`).

What this project writes there is joblib's store of the cached stages
(:class:`~classify_images.pipeline.extraction.stages.StageCache`), under ``joblib/classify_images/``.
:func:`clear_cache` deletes that sub-folder only — never anything else a user may keep in
a folder they pointed the cache at — and then the folders left empty (with the
``.gitignore`` joblib writes there); the cache folder itself only when the stage cache created
it (a folder the user made stays, even empty).  Nothing here follows a symbolic link out of the cache:
when ``joblib/`` or ``joblib/classify_images/`` is a link, size, prune and clear see an
empty cache, and clear removes the link itself (what it points to is kept).  :func:`prune_cache` deletes only the temporary files
that writers killed in the middle of a write left behind (``cache prune``; which ones are
stale, and why that is safe with writers on several machines:
:mod:`~classify_images.pipeline.storage.cache_store`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ...files import read_format_json, read_regular_bytes
from .cache_store import (
    CREATED_FORMAT,
    CREATED_MARKER,
    STALE_AFTER_SECONDS,
    is_stale_temporary,
    remove_stale_temporaries,
)

__all__ = ["default_cache_dir", "CacheUsage", "cache_usage", "clear_cache", "prune_cache", "format_bytes", "ENTRIES"]

#: The part of the cache folder that this project's stage cache writes (joblib's layout:
#: ``<location>/joblib/<module path>/<function>/<key>/``).
ENTRIES = Path("joblib") / "classify_images"
#: First line of the ``.gitignore`` that joblib writes in its cache folder.
_JOBLIB_MARKER = "# Created by joblib automatically."


def default_cache_dir() -> Path:
    """``$CLASSIFY_IMAGES_CACHE``, else ``$XDG_CACHE_HOME/classify-images``, else ``~/.cache/classify-images``."""
    env = os.environ.get("CLASSIFY_IMAGES_CACHE")
    xdg = os.environ.get("XDG_CACHE_HOME")
    # XDG Base Directory: a relative XDG_CACHE_HOME is invalid and ignored
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return Path(env) if env else base / "classify-images"


@dataclass(frozen=True)
class CacheUsage:
    """Size of the stage cache."""

    path: Path  #: the cache folder
    n_bytes: int  #: bytes of the files under :data:`ENTRIES`
    n_files: int  #: number of those files
    exists: bool  #: whether the cache folder exists
    n_stale: int = 0  #: of those files, the temporaries killed writers left (:func:`prune_cache` removes them)
    stale_bytes: int = 0  #: their bytes


def format_bytes(n_bytes: int) -> str:
    """``1.5 MB`` style (decimal units, as ``du --si``)."""
    value = float(n_bytes)
    for unit in ("bytes", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _link_in_entries(root: Path) -> Path | None:
    """The first of ``root/joblib``, ``root/joblib/classify_images`` that is a symbolic link (None: neither)."""
    for path in (root / ENTRIES.parent, root / ENTRIES):
        if path.is_symlink():
            return path
    return None


def _unreadable(error: OSError) -> None:
    """``os.walk``'s errors: a folder removed meanwhile (a concurrent build) is no error; one that
    cannot be read is (a size of "0 bytes" would be false)."""
    if not isinstance(error, FileNotFoundError):
        raise error


def cache_usage(cache_dir: str | os.PathLike, *, max_age: float = STALE_AFTER_SECONDS) -> CacheUsage:
    """Bytes and files of the stage cache in ``cache_dir``, and of its stale temporaries
    (:func:`~classify_images.pipeline.storage.cache_store.is_stale_temporary` with ``max_age``).
    Symbolic links are not followed.

    Raises
    ------
    OSError
        A folder of the cache cannot be read (permissions): its size is unknown, not zero.
    """
    root = Path(cache_dir)
    n_bytes = n_files = n_stale = stale_bytes = 0
    walked = [] if _link_in_entries(root) else os.walk(root / ENTRIES, onerror=_unreadable)
    for folder, _, names in walked:
        for name in names:
            path = os.path.join(folder, name)
            try:
                size = os.lstat(path).st_size
            except OSError:  # removed meanwhile by a concurrent build
                continue
            n_bytes += size
            n_files += 1
            if is_stale_temporary(path, max_age=max_age):
                n_stale += 1
                stale_bytes += size
    return CacheUsage(root, n_bytes, n_files, root.is_dir(), n_stale, stale_bytes)


def prune_cache(cache_dir: str | os.PathLike, *, max_age: float = STALE_AFTER_SECONDS) -> CacheUsage:
    """Delete the stale temporaries in the stage cache in ``cache_dir``; entries and live writers' files stay.

    Returns
    -------
    usage : CacheUsage
        What was deleted (``n_files``, ``n_bytes``; the same numbers in ``n_stale``, ``stale_bytes``).
    """
    root = Path(cache_dir)
    n_files = n_bytes = 0
    for folder, _, _ in [] if _link_in_entries(root) else os.walk(root / ENTRIES):
        removed = remove_stale_temporaries(folder, max_age=max_age)
        n_files += len(removed)
        n_bytes += sum(size for _, size in removed)
    return CacheUsage(root, n_bytes, n_files, root.is_dir(), n_files, n_bytes)


def clear_cache(cache_dir: str | os.PathLike) -> CacheUsage:
    """Delete the stage cache in ``cache_dir`` (only :data:`ENTRIES`), the empty ``joblib/`` and
    joblib's ``.gitignore`` left alone, and the cache folder itself only when the cache created it
    (its :data:`~classify_images.pipeline.storage.cache_store.CREATED_MARKER`) and it is empty: a
    folder the user made — an empty project folder given as ``--cache-dir`` — stays.

    A symbolic link at ``joblib/`` or ``joblib/classify_images/`` is removed itself, never
    followed: what it points to (a user's folder, perhaps) is kept.

    Returns
    -------
    usage : CacheUsage
        What was deleted.
    """
    root = Path(cache_dir)
    usage = cache_usage(root)
    entries = root / ENTRIES
    link = _link_in_entries(root)
    if link is not None:
        link.unlink()
    elif entries.is_dir():
        shutil.rmtree(entries)  # (links inside are removed, not followed)
    with contextlib.suppress(OSError):
        entries.parent.rmdir()  # only when empty
    marker = root / ".gitignore"
    with contextlib.suppress(OSError, ValueError):  # (a FIFO, a device or a large file there is not joblib's)
        if not marker.is_symlink() and read_regular_bytes(marker, max_bytes=4096).startswith(_JOBLIB_MARKER.encode()):
            if {entry.name for entry in root.iterdir()} <= {marker.name, CREATED_MARKER}:
                marker.unlink()  # joblib's own "ignore this folder" file, alone with nothing left to ignore
    created = root / CREATED_MARKER
    if read_format_json(created, CREATED_FORMAT, max_bytes=4096) is not None:
        with contextlib.suppress(OSError):
            if [entry.name for entry in root.iterdir()] == [CREATED_MARKER]:
                created.unlink()  # a folder the cache created, empty again: removed
                root.rmdir()
    return usage
