"""Atomic, durable file and folder writes: a reader sees the old content or the new, never half.

Every file the pipeline writes for users (feature-set manifests, model files, reports,
plots, the demo's images) goes through :func:`atomic_write`: the content is written to a
temporary name in the destination folder, flushed to the disk (``fsync``), renamed over
the destination with :func:`os.replace` — atomic within one file system — and the
folder's entry is flushed too, so a power loss leaves either the old file or the complete
new one, never a truncated or empty destination.

A feature-set folder is replaced as a whole by :func:`replace_folder`: on Linux the new
folder and the old one trade names in one ``renameat2(RENAME_EXCHANGE)`` system call, so
there is no moment at which the destination is missing; elsewhere (or on a file system
without that call) the old folder is moved aside and the new one renamed in its place,
which leaves a window of two ``rename`` calls.

Temporary names carry the writer's process id (``.<name>.<pid>.tmp``,
``.<name>.partial-<pid>``, ``.<name>.old-<pid>``); :func:`remove_stale_siblings` deletes
those whose process is gone, so an interrupted or killed run does not keep a full disk
full.  A write that fails (``ENOSPC``, ``EDQUOT``, …) removes its temporary file before the
error propagates.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import ctypes.util
import errno
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

__all__ = [
    "atomic_write",
    "atomic_write_json",
    "fsync_file",
    "fsync_folder",
    "replace_folder",
    "remove_stale_siblings",
    "is_temporary_of",
    "process_is_alive",
    "DISK_FULL_ERRNOS",
    "before_replace",
]

#: ``errno`` values meaning "the disk (or the user's quota) is full".
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})

# renameat2(2) flag: atomically exchange the two paths (Linux ≥ 3.15).
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


#: Called with ``(destination, complete temporary file)`` just before :func:`atomic_write` renames
#: one over the other (set by :func:`before_replace`).
_BEFORE_REPLACE: contextvars.ContextVar[Callable[[Path, Path], None] | None] = contextvars.ContextVar(
    "classify_images_before_replace", default=None
)


@contextlib.contextmanager
def before_replace(callback: Callable[[Path, Path], None]) -> Iterator[None]:
    """While the block runs, :func:`atomic_write` calls ``callback(destination, temporary)`` once the
    new content is complete and synced, before it replaces ``destination``: the output guard records
    what identifies those bytes first, so that a crash at any moment leaves the file recorded."""
    token = _BEFORE_REPLACE.set(callback)
    try:
        yield
    finally:
        _BEFORE_REPLACE.reset(token)


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a file's content to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_folder(path: str | os.PathLike) -> None:
    """Flush a folder's entries (names created, renamed or removed in it) to the disk.

    File systems or platforms that cannot open or sync a folder are silently accepted:
    the rename is still atomic there, only its durability is up to the system.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike,
    mode: str = "wb",
    *,
    encoding: str | None = None,
    concurrent: bool = False,
    durable: bool = True,
) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success sync it and rename it over ``path``.

    Parameters
    ----------
    path : path-like
        Destination.  Its folder is created if needed.
    mode : {"wb", "w"}
        Binary or text.
    encoding : str, optional
        Text encoding (``"utf-8"`` when ``mode="w"`` and none is given).
    concurrent : bool, default=False
        Writers in other threads, processes or machines may write ``path`` at the same time
        (cluster workers writing a shard of a shared folder): the temporary name is random,
        ``.<name>.<random>.tmp``, and no stale temporaries are removed (a process id says
        nothing of another machine's writers).
    durable : bool, default=True
        Flush the file and its folder to the disk.  ``False`` keeps the write atomic for
        readers and for a process that dies, not across a power loss: for a file rewritten
        many times in a row whose last version is written durable (the output marker while a
        report is written).

    Yields
    ------
    handle : file object
        Write the content to it.  If the block raises (a full disk included), the
        temporary file is removed and ``path`` is left as it was.

    Raises
    ------
    OSError
        The folder cannot be created or the file cannot be written; its ``filename`` is
        ``path``, the name the caller gave, never the temporary name.

    Examples
    --------
    >>> with atomic_write("report.md", "w") as handle:   # doctest: +SKIP
    ...     handle.write(text)
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', not {mode!r}")
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file stands where a folder of ``path`` should be
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.fspath(path)) from None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from exc
    if concurrent:
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    else:
        remove_stale_siblings(path.parent, path.name)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if mode == "w" and encoding is None:
        encoding = "utf-8"
    try:
        with open(tmp, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        callback = _BEFORE_REPLACE.get()
        if callback is not None:
            token = _BEFORE_REPLACE.set(None)  # (the callback's own writes are not reported to it)
            try:
                callback(path, tmp)
            finally:
                _BEFORE_REPLACE.reset(token)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if exc.filename == os.fspath(tmp):  # the user named ``path``, not its temporary sibling
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from exc
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        fsync_folder(path.parent)


def atomic_write_json(path: str | os.PathLike, payload: Any, *, durable: bool = True) -> None:
    """Write ``payload`` as indented UTF-8 JSON to ``path`` through :func:`atomic_write`."""
    with atomic_write(path, "w", durable=durable) as handle:
        handle.write(json.dumps(payload, indent=2) + "\n")


def process_is_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine (``kill(pid, 0)``)."""
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # it exists, owned by someone else
    return True


def _stale_pattern(name: str) -> re.Pattern:
    """Temporary names this module and the feature store give to ``name``."""
    return re.compile(rf"\.{re.escape(name)}\.(?:(\d+)\.tmp|partial-(\d+)|old-(\d+))")


def is_temporary_of(entry_name: str, name: str) -> bool:
    """True when ``entry_name`` is the temporary file :func:`atomic_write` writes ``name`` through
    (``.<name>.<pid>.tmp``, or ``.<name>.<32 hex digits>.tmp`` for a concurrent write), finished
    or still being written by some process."""
    return re.fullmatch(rf"\.{re.escape(name)}\.(?:\d+|[0-9a-f]{{32}})\.tmp", entry_name) is not None


def remove_stale_siblings(
    folder: str | os.PathLike, name: str, remove_folder: Callable[[Path], Any] | None = None
) -> list[Path]:
    """Delete the temporary siblings of ``folder/name`` left by processes that are gone.

    Only names of the form ``.<name>.<pid>.tmp``, ``.<name>.partial-<pid>`` and
    ``.<name>.old-<pid>`` — the names this project writes — are considered, and only
    when no process ``<pid>`` is running.  A stale *folder* is handed to ``remove_folder``
    (which knows what its writer puts in it) and left alone when none is given.

    Returns
    -------
    list of Path
        What was removed.
    """
    pattern, removed = _stale_pattern(name), []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None:
            continue
        pid = int(next(group for group in match.groups() if group is not None))
        if process_is_alive(pid):
            continue
        path = Path(entry.path)
        with contextlib.suppress(OSError):
            if not entry.is_dir(follow_symlinks=False):
                path.unlink()
            elif remove_folder is not None:
                remove_folder(path)
            else:
                continue
            removed.append(path)
    return removed


def _libc_renameat2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_RENAMEAT2 = _libc_renameat2()


def exchange_paths(first: str | os.PathLike, second: str | os.PathLike) -> bool:
    """Atomically swap two existing paths (``renameat2(RENAME_EXCHANGE)``).

    Returns
    -------
    bool
        False when the platform or the file system does not support the exchange (the
        paths are then untouched); other failures raise :class:`OSError`.
    """
    if _RENAMEAT2 is None:
        return False
    status = _RENAMEAT2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if status == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(first), None, os.fspath(second))


def replace_folder(new: str | os.PathLike, destination: str | os.PathLike, aside: str | os.PathLike) -> bool:
    """Put the folder ``new`` at ``destination``; the previous content ends at ``aside``.

    ``new``'s files must already be synced; this syncs the parent folder after the
    rename.  With an existing ``destination`` the two trade names atomically when the
    system allows (:func:`exchange_paths`), so ``destination`` is never missing;
    otherwise ``destination`` is renamed to ``aside`` first.

    Returns
    -------
    bool
        True when a previous ``destination`` now sits at ``aside`` (the caller removes it).
    """
    new, destination, aside = Path(new), Path(destination), Path(aside)
    fsync_folder(new)
    had_previous = os.path.lexists(destination)
    if not had_previous:
        os.rename(new, destination)
    elif exchange_paths(new, destination):
        os.rename(new, aside)  # ``new`` now holds the previous content
    else:
        os.rename(destination, aside)
        os.rename(new, destination)
    fsync_folder(destination.parent)
    return had_previous
