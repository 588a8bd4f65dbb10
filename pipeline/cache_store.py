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

:func:`secure_cache_folder` checks the cache folder itself: it is created private (0700),
and a folder owned by another user, or writable by the group or by others, is refused with
one line, because whoever can write there decides what the build reads back.

Entries are not ``fsync``-ed: a torn entry after a power loss is read as a miss and
recomputed, so durability there would cost time and buy nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from joblib import register_store_backend
from joblib._store_backends import FileSystemStoreBackend

__all__ = ["BACKEND_NAME", "CacheFolderError", "NpzStoreBackend", "secure_cache_folder", "encode_result", "decode_result"]

#: The name the backend is registered under (``joblib.Memory(..., backend=BACKEND_NAME)``).
BACKEND_NAME = "classify-images-npz"
OUTPUT = "output.npz"
_SCHEMA = "__schema__"
#: Python scalar types a dictionary result may hold, by the name stored in the schema.
_SCALARS = {"bool": bool, "int": int, "float": float, "str": str}


class CacheFolderError(ValueError):
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
    try:
        with np.load(filename, allow_pickle=False) as archive:
            return decode_result({name: archive[name] for name in archive.files})
    except FileNotFoundError:
        raise _Unreadable(filename) from None
    except Exception as exc:  # noqa: BLE001 - a pickle, a torn file, tampering: all a miss
        raise _Unreadable(f"{filename}: {exc}") from None


class NpzStoreBackend(FileSystemStoreBackend):
    """joblib's file-system store with results in ``.npz`` files read without pickle.

    ``contains_item`` reads and checks the entry (an unreadable one is not "contained",
    so joblib recomputes it instead of warning with a traceback) and hands the result to
    the ``load_item`` that follows in the same thread.
    """

    def configure(self, location, verbose=1, backend_options=None):
        super().configure(location, verbose=verbose, backend_options=backend_options)
        self._loaded: dict[int, tuple[tuple, Any]] = {}  # thread → (call id, result)

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

        def write_npz(to_write, filename):
            with open(filename, "wb") as handle:
                np.savez(handle, **to_write)

        self._concurrency_safe_write(arrays, self._output(call_id), write_npz)

    def _concurrency_safe_write(self, to_write, filename, write_func):
        """joblib's temporary-then-rename write, removing the temporary file on failure."""
        temporary = f"{filename}.{uuid.uuid4().hex}-{os.getpid()}-{threading.get_ident()}"
        try:
            write_func(to_write, temporary)
            self._move_item(temporary, filename)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_loaded"] = {}
        return state


register_store_backend(BACKEND_NAME, NpzStoreBackend)


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
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.stat(folder)
    except FileExistsError:
        raise CacheFolderError(f"cache folder {folder} is a file; use --cache-dir with a folder") from None
    except OSError as exc:
        raise CacheFolderError(f"cannot create the cache folder {folder} ({exc.strerror}); use --cache-dir or --no-cache") from None
    for checked in (folder, folder / "joblib"):
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
