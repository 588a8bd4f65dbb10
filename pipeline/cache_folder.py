"""The stage-cache folder as seen by its user: where it is, how big, and clearing it.

Where: ``$CLASSIFY_IMAGES_CACHE`` when set, else ``$XDG_CACHE_HOME/classify-images`` (the
XDG Base Directory convention), else ``~/.cache/classify-images``
(:func:`~classify_images.pipeline.build.default_cache_dir`).

What this project writes there is joblib's store of the cached stages
(:class:`~classify_images.pipeline.stages.StageCache`), under ``joblib/classify_images/``.
:func:`clear_cache` deletes that sub-folder only — never anything else a user may keep in
a folder they pointed the cache at — and then the folders left empty (with the
``.gitignore`` joblib writes there).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CacheUsage", "cache_usage", "clear_cache", "format_bytes", "ENTRIES"]

#: The part of the cache folder that this project's stage cache writes (joblib's layout:
#: ``<location>/joblib/<module path>/<function>/<key>/``).
ENTRIES = Path("joblib") / "classify_images"
#: First line of the ``.gitignore`` that joblib writes in its cache folder.
_JOBLIB_MARKER = "# Created by joblib automatically."


@dataclass(frozen=True)
class CacheUsage:
    """Size of the stage cache."""

    path: Path  #: the cache folder
    n_bytes: int  #: bytes of the files under :data:`ENTRIES`
    n_files: int  #: number of those files
    exists: bool  #: whether the cache folder exists


def format_bytes(n_bytes: int) -> str:
    """``1.5 MB`` style (decimal units, as ``du --si``)."""
    value = float(n_bytes)
    for unit in ("bytes", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def cache_usage(cache_dir: str | os.PathLike) -> CacheUsage:
    """Bytes and files of the stage cache in ``cache_dir`` (symbolic links are not followed)."""
    root = Path(cache_dir)
    n_bytes = n_files = 0
    for folder, _, names in os.walk(root / ENTRIES):
        for name in names:
            try:
                n_bytes += os.lstat(os.path.join(folder, name)).st_size
                n_files += 1
            except OSError:  # removed meanwhile by a concurrent build
                continue
    return CacheUsage(root, n_bytes, n_files, root.is_dir())


def clear_cache(cache_dir: str | os.PathLike) -> CacheUsage:
    """Delete the stage cache in ``cache_dir`` (only :data:`ENTRIES`), then the folders left empty.

    Returns
    -------
    usage : CacheUsage
        What was deleted.
    """
    root = Path(cache_dir)
    usage = cache_usage(root)
    entries = root / ENTRIES
    if entries.is_symlink():
        entries.unlink()
    elif entries.is_dir():
        shutil.rmtree(entries)
    with contextlib.suppress(OSError):
        entries.parent.rmdir()  # only when empty
    marker = root / ".gitignore"
    with contextlib.suppress(OSError):
        if not marker.is_symlink() and marker.read_text(errors="replace").startswith(_JOBLIB_MARKER):
            if [entry.name for entry in root.iterdir()] == [marker.name]:
                marker.unlink()  # joblib's own "ignore this folder" file, alone with nothing left to ignore
    with contextlib.suppress(OSError):
        root.rmdir()
    return usage
