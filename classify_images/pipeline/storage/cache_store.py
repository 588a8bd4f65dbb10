"""The stage cache's storage: joblib's ``Memory`` with NumPy ``.npz`` files instead of pickle.

joblib stores a memoised result as a pickle (``output.pkl``); loading a pickle runs whatever
code it names, so anyone who can write into a shared or world-writable cache folder could
run code in the next build.  :class:`NpzStoreBackend` keeps joblib's ``Memory`` (its keys,
its folder layout, its function-code check) and changes only how a result is stored:

* a result is written as ``output.npz`` — the stage outputs are NumPy arrays (descriptors,
  codes, samples, the codebook) or small dictionaries of arrays and plain scalars (the
  check of an image) — with a JSON description of its structure, and read back with
  ``numpy.load(allow_pickle=False)``: no code can run while reading, whatever the file
  holds.  A result of any other type is refused when it is written (a programming error);
* a file that does not read back exactly as that structure — a planted pickle, a torn or
  truncated file, an object array — is a cache *miss*: the stage is recomputed and the
  entry rewritten.  ``output.pkl`` files are never opened;
* a write that fails (a full disk) removes its temporary file before the error propagates.

**Temporaries of killed writers.**  Every file of an entry is written under a temporary name
beside it and renamed into place (:meth:`NpzStoreBackend._concurrency_safe_write`); a writer
killed in between (a cluster worker killed by the nanny, out of memory, ``SIGKILL``) leaves the
temporary behind.  Readers never open one (they open ``output.npz`` only), so it costs disk,
never a wrong read.  Its name, ``<file>.<uuid>-h<host>-<pid>-<thread>``, records the writer's
host (a short digest of its host name) and process id, and :func:`is_stale_temporary` calls it
stale when either

* it was written on *this* host and no process ``<pid>`` runs here any more (while it runs,
  the temporary is kept whatever its age; a process id the system gave to a new process
  keeps it until that one ends too: the safe direction), or
* it was written on another host and has not been written to for :data:`STALE_AFTER_SECONDS`
  (an hour).

Why both: the cache is meant to be shared by the workers of several machines (NFS), and a
process id says nothing about another machine's processes, so a temporary of another host is
judged only by its age — a live writer touches its file with every write and renames it right
after the last one, so an hour without a write is a dead writer, with a margin wide enough for
the clock difference between a file server and its clients.  (Temporaries of older versions,
without the host, are judged by age only.)  And removing a live writer's temporary would still
be harmless: a writer whose temporary has gone skips that entry (the result it returns is
unaffected; the next build recomputes the entry), so a wrong guess costs one cache entry, never
a failed build or a torn read.  Stale temporaries are removed when an entry's folder is written
again (the writer sweeps its folder first: a rerun after a killed task cleans what the kill
left, at the cost of one small ``scandir``; a ``func_code.py`` temporary, which sits in the
folder of all of a stage's entries, is left to ``cache prune``), by ``classify-images cache prune`` (all of them,
:func:`~classify_images.pipeline.storage.cache_folder.prune_cache`), and by ``cache clear``.

:func:`secure_cache_folder` checks the cache folder itself: it is created private (0700),
and a folder owned by another user, or writable by the group or by others, is refused with
one line, because whoever can write there decides what the build reads back.

**joblib's private API.**  ``joblib.register_store_backend`` is public, but it takes a subclass
of the private ``joblib._store_backends.StoreBackendBase``, and this backend reuses the private
``FileSystemStoreBackend`` (its layout, ``_move_item``, the ``_concurrency_safe_write`` hook):
there is no public extension point to move to.  pyproject.toml therefore pins joblib to the
releases ``tests/test_joblib_store_api.py`` passes on (1.4 to 1.6; with 1.3 every cached stage
was recomputed), and that test names this module when a joblib changes what it relies on.

Entries are not ``fsync``-ed: a torn entry after a power loss is read as a miss and
recomputed, so durability there would cost time and buy nothing.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import socket
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from joblib import register_store_backend
from joblib._store_backends import FileSystemStoreBackend

from ...errors import ClassifyImagesError
from ...files import FileTooLargeError, load_npz_checked, open_regular_file
from .atomic import atomic_write_json, process_is_alive

__all__ = [
    "BACKEND_NAME",
    "CacheFolderError",
    "NpzStoreBackend",
    "secure_cache_folder",
    "encode_result",
    "decode_result",
    "STALE_AFTER_SECONDS",
    "is_stale_temporary",
    "remove_stale_temporaries",
]

#: The name the backend is registered under (``joblib.Memory(..., backend=BACKEND_NAME)``).
BACKEND_NAME = "classify-images-npz"
OUTPUT = "output.npz"
_SCHEMA = "__schema__"
#: Python scalar types a dictionary result may hold, by the name stored in the schema.
_SCALARS = {"bool": bool, "int": int, "float": float, "str": str}
#: A temporary file not written to for this long is a dead writer's, whichever host wrote it.
STALE_AFTER_SECONDS = 3600.0
#: Temporary names of an entry's files: ``<file>.<uuid>-h<host digest>-<pid>-<thread>`` (joblib's
#: own form, ``<file>.<uuid>-<pid>-<thread>``, has no host).
_TEMPORARY = re.compile(r"(?P<file>.+)\.[0-9a-f]{32}-(?:h(?P<host>[0-9a-f]{12})-)?(?P<pid>\d+)-\d+")


def _host_digest() -> str:
    """This host's tag in temporary names: 12 hex digits of the SHA-1 of its name (fixed length, no separators)."""
    return hashlib.sha1(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:12]


_HOST = _host_digest()


def is_stale_temporary(
    path: str | os.PathLike, *, max_age: float = STALE_AFTER_SECONDS, now: float | None = None
) -> bool:
    """Whether ``path`` is a temporary entry file that no live writer can still rename.

    True when its name is a temporary's and either its writer ran on this host and is gone,
    or it was written on another host (or by a version that did not record the host) and
    last written ``max_age`` seconds ago or more (see the module's docstring for why a
    foreign host's temporary is judged by its age only).  A path that vanished meanwhile
    is not stale (there is nothing to remove).
    """
    match = _TEMPORARY.fullmatch(os.path.basename(path))
    if match is None:
        return False
    if match["host"] == _HOST:
        return not process_is_alive(int(match["pid"]))
    try:
        modified = os.lstat(path).st_mtime
    except OSError:
        return False
    return (time.time() if now is None else now) - modified >= max_age


def remove_stale_temporaries(
    folder: str | os.PathLike, *, max_age: float = STALE_AFTER_SECONDS
) -> list[tuple[str, int]]:
    """Delete the stale temporaries (:func:`is_stale_temporary`) directly in ``folder``.

    Returns
    -------
    list of (path, n_bytes)
        What was removed.
    """
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not entry.is_file(follow_symlinks=False) or not is_stale_temporary(entry.path, max_age=max_age):
            continue
        with contextlib.suppress(OSError):
            size = entry.stat(follow_symlinks=False).st_size
            os.unlink(entry.path)
            removed.append((entry.path, size))
    return removed


class CacheFolderError(ClassifyImagesError, ValueError):
    """The cache folder cannot be trusted or used (one line, user-facing)."""


class _Unreadable(Exception):
    """A cache entry that is not a result this backend wrote (treated as a miss)."""


def _check_array(where: str, value: np.ndarray) -> np.ndarray:
    if value.dtype.hasobject:
        raise TypeError(f"stage cache: {where} is an object array, which cannot be stored without pickle")
    return value


def encode_result(result: Any) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` holding ``result`` (an array, or a dict of arrays and scalars).

    Raises
    ------
    TypeError
        Any other result (the cache stores nothing it could not read back without pickle).
    """
    if isinstance(result, np.ndarray):
        return {_SCHEMA: np.array(json.dumps({"kind": "array"})), "value": _check_array("result", result)}
    if not isinstance(result, dict) or not all(isinstance(key, str) and key != _SCHEMA for key in result):
        raise TypeError(f"stage cache: cannot store a {type(result).__name__} without pickle")
    fields, arrays = {}, {}
    for key, value in result.items():
        if isinstance(value, np.ndarray):
            fields[key], arrays[key] = "array", _check_array(key, value)
        elif isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            fields[key], arrays[key] = "int_tuple", np.asarray(value, dtype=np.int64).reshape(len(value))
        elif type(value) in _SCALARS.values():
            name = next(n for n, t in _SCALARS.items() if type(value) is t)
            fields[key], arrays[key] = name, np.array(value)
        else:
            raise TypeError(f"stage cache: cannot store {key!r} of type {type(value).__name__} without pickle")
    return {_SCHEMA: np.array(json.dumps({"kind": "dict", "fields": fields})), **arrays}


def decode_result(arrays: dict[str, np.ndarray]) -> Any:
    """The result :func:`encode_result` stored (raises :class:`ValueError` on anything else)."""
    schema = json.loads(str(arrays[_SCHEMA][()]))
    if schema.get("kind") == "array":
        if set(arrays) != {_SCHEMA, "value"}:
            raise ValueError("unexpected arrays")
        return arrays["value"]
    fields = schema.get("fields")
    if schema.get("kind") != "dict" or not isinstance(fields, dict) or set(arrays) != {_SCHEMA, *fields}:
        raise ValueError("unexpected structure")
    result = {}
    for key, kind in fields.items():
        value = arrays[key]
        if kind == "array":
            result[key] = value
        elif kind == "int_tuple":
            if value.ndim != 1 or value.dtype.kind != "i":
                raise ValueError(f"{key}: not a tuple of integers")
            result[key] = tuple(int(v) for v in value)
        elif kind in _SCALARS:
            if value.ndim != 0:
                raise ValueError(f"{key}: not a scalar")
            result[key] = _SCALARS[kind](value[()])
        else:
            raise ValueError(f"{key}: unknown kind {kind!r}")
    return result


def _read_npz(filename: str) -> Any:
    try:  # a regular file (a planted FIFO is not waited on), headers checked against the bytes held
        return decode_result(load_npz_checked(filename))
    except FileNotFoundError:
        raise _Unreadable(filename) from None
    except Exception as exc:
        raise _Unreadable(f"{filename}: {exc}") from None


#: Bound on joblib's small files of an entry (its metadata, the cached function's code).
MAX_JOBLIB_FILE_BYTES = 16 * 2**20


class NpzStoreBackend(FileSystemStoreBackend):
    """joblib's file-system store with results in ``.npz`` files read without pickle.

    ``contains_item`` reads and checks the entry (an unreadable one is not "contained",
    so joblib recomputes it instead of warning with a traceback) and hands the result to
    the ``load_item`` that follows in the same thread.
    """

    def configure(self, location, verbose=1, backend_options=None):
        super().configure(location, verbose=verbose, backend_options=backend_options)
        self._loaded: dict[int, tuple[tuple, Any]] = {}  # thread → (call id, result)

    def _open_item(self, f, mode):
        """joblib's own reads (``metadata.json``, ``func_code.py``) open regular files only: a FIFO
        or a device planted in the cache is an unreadable entry (a miss), never waited on."""
        if "r" in mode and "+" not in mode:
            try:
                return open_regular_file(f, max_bytes=MAX_JOBLIB_FILE_BYTES)
            except FileTooLargeError as exc:  # joblib takes an OSError for "no such entry"
                raise OSError(errno.EFBIG, str(exc), f) from None
        return super()._open_item(f, mode)

    def _output(self, call_id) -> str:
        return os.path.join(self.location, *call_id, OUTPUT)

    def contains_item(self, call_id) -> bool:
        try:
            result = _read_npz(self._output(call_id))
        except _Unreadable:
            return False
        self._loaded[threading.get_ident()] = (tuple(call_id), result)
        return True

    def load_item(self, call_id, verbose=1, timestamp=None, metadata=None):
        checked = self._loaded.pop(threading.get_ident(), None)
        if checked is not None and checked[0] == tuple(call_id):
            return checked[1]
        try:
            return _read_npz(self._output(call_id))
        except _Unreadable as exc:
            raise KeyError(f"cache entry unreadable: {exc}") from None

    def dump_item(self, call_id, item, verbose=1):
        arrays = encode_result(item)
        item_path = os.path.join(self.location, *call_id)
        self.create_location(item_path)
        remove_stale_temporaries(item_path)  # what a writer of this entry killed earlier left

        def write_npz(to_write, filename):
            with open(filename, "wb") as handle:
                np.savez(handle, **to_write)

        self._concurrency_safe_write(arrays, self._output(call_id), write_npz)

    def _concurrency_safe_write(self, to_write, filename, write_func):
        """joblib's temporary-then-rename write, removing the temporary file on failure.

        The temporary's name holds this host's digest and process id (:func:`is_stale_temporary`).
        When the temporary has vanished before its rename (a ``cache prune`` or ``cache clear``
        took it), the entry is not written: the caller's result is unaffected, and the next
        build recomputes the entry.
        """
        temporary = f"{filename}.{uuid.uuid4().hex}-h{_HOST}-{os.getpid()}-{threading.get_ident()}"
        try:
            write_func(to_write, temporary)
            try:
                self._move_item(temporary, filename)
            except FileNotFoundError:
                if os.path.lexists(temporary):
                    raise
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_loaded"] = {}
        return state


register_store_backend(BACKEND_NAME, NpzStoreBackend)


#: How deep below the cache folder the trust check looks: ``joblib/``, ``joblib/classify_images/``, its
#: packages and modules and their cached functions (``…/pipeline/stages/<function>``; every folder but the entries;
#: the entries below a function's folder can only be created by whoever may write into it).
_TRUSTED_DEPTH = 5


def _trusted_folders(folder: Path) -> list[Path]:
    """The cache folder and its sub-folders down to :data:`_TRUSTED_DEPTH` levels (symbolic links are
    checked as what they point to, not walked)."""
    found, level = [folder], [folder]
    for _ in range(_TRUSTED_DEPTH):
        below = []
        for parent in level:
            with contextlib.suppress(OSError):
                below += sorted(
                    Path(entry.path)
                    for entry in os.scandir(parent)
                    if entry.is_dir() and not entry.name.startswith(".")
                )
        found += below
        level = [path for path in below if not path.is_symlink()]
    return found


#: The file the stage cache writes in a cache folder it creates (``cache clear`` removes such a
#: folder once empty; a folder it did not create is kept, empty or not).
CREATED_MARKER = ".classify-images-cache.json"
#: Its format key.
CREATED_FORMAT = "classify-images-cache-folder"


def secure_cache_folder(path: str | os.PathLike) -> Path:
    """Create the cache folder private (0700), or check that an existing one can be trusted.

    Raises
    ------
    CacheFolderError
        The path is not a folder, belongs to another user, or is writable by the group or
        by others (whoever can write there decides what a build reads back).
    """
    folder = Path(path).expanduser()
    try:
        try:
            folder.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            if not folder.is_dir():
                raise
        else:  # created here: ``cache clear`` may remove it once empty (never a folder it did not create)
            atomic_write_json(folder / CREATED_MARKER, {"format": CREATED_FORMAT})
        info = os.stat(folder)
    except FileExistsError:
        raise CacheFolderError(f"cache folder {folder} is a file; use --cache-dir with a folder") from None
    except OSError as exc:
        raise CacheFolderError(
            f"cannot create the cache folder {folder} ({exc.strerror}); use --cache-dir or --no-cache"
        ) from None
    for checked in _trusted_folders(folder):
        try:
            info = os.stat(checked)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise CacheFolderError(f"cache folder {checked} is not a folder; use --cache-dir with a folder")
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            raise CacheFolderError(
                f"cache folder {checked} belongs to another user (uid {info.st_uid}); a build trusts what its "
                "cache holds, so use --cache-dir with a folder of your own (or --no-cache)"
            )
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise CacheFolderError(
                f"cache folder {checked} is writable by other users (mode {stat.S_IMODE(info.st_mode):o}); "
                f"run 'chmod go-w {checked}' or use --cache-dir with a private folder (or --no-cache)"
            )
    return folder
