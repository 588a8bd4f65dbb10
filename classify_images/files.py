"""Reading files a user received, defensively: regular files only, sizes and JSON bounded.

A path read from a feature set's manifest, a model file, a stage-cache entry or a dataset
may name anything: a named pipe (FIFO; ``open`` waits for a writer forever), a device
(``/dev/zero`` never ends), a folder, a huge sparse file.  Every such read goes through
:func:`open_regular_file`, which opens with ``O_NONBLOCK`` (opening a FIFO does not wait) and
checks ``fstat`` of the *opened* descriptor (no race between the check and the read):
anything but a regular file is refused with :class:`NotRegularFileError` naming what it is.

JSON read from such files is bounded before parsing (:func:`loads_bounded_json`): its length
and its nesting depth (Python's parser recurses per level; 200 000 nested ``[`` end in
``RecursionError``).  ``.npy`` members are checked header against bytes
(:func:`read_npy_header`): an array header announcing 80 GB in a 64-byte file is refused
before anything is allocated.

This module imports only NumPy (lazily) and the error base, so every layer may use it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

from .errors import ClassifyImagesError

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "FileTooLargeError",
    "JsonBoundsError",
    "NotRegularFileError",
    "describe_file_kind",
    "is_regular_file",
    "json_depth",
    "load_npy_checked",
    "loads_bounded_json",
    "open_regular_file",
    "read_format_json",
    "read_npy_header",
    "read_regular_bytes",
]

#: Default bound on a JSON document read from a file (manifests of a million images fit).
MAX_JSON_BYTES = 256 * 2**20
#: Bound on the nesting depth of such a document (ours nest at most 6 levels).
MAX_JSON_DEPTH = 64


class NotRegularFileError(ClassifyImagesError, OSError):
    """A path that should name a regular file names a FIFO, a device, a socket or a folder
    (``kind`` says which: ``"a named pipe (FIFO)"``, …; ``strerror`` is the one line)."""

    kind: str = "not a regular file"


def _not_regular(name: str | bytes, kind: str, code: int) -> NotRegularFileError:
    error = NotRegularFileError(code, f"{os.fsdecode(name)} is {kind}, not a regular file", name)
    error.kind = kind
    return error


class FileTooLargeError(ClassifyImagesError, ValueError):
    """A file is larger than what its reader accepts."""


class JsonBoundsError(ClassifyImagesError, ValueError):
    """A JSON document is longer or nested deeper than its reader accepts."""


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def describe_file_kind(mode: int) -> str:
    """``"a named pipe (FIFO)"``, ``"a character device"``, … for an ``st_mode`` that is not a regular file."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _size_text(n_bytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.3g} {unit}"
    return f"{n_bytes} bytes"


def open_regular_file(path: str | os.PathLike, *, max_bytes: int | None = None) -> BinaryIO:
    """Open ``path`` for binary reading if it is a regular file (symbolic links followed).

    Opened with ``O_NONBLOCK`` so that opening a FIFO returns at once; the type and size
    are those of the opened descriptor (``fstat``), then blocking mode is restored.

    Raises
    ------
    NotRegularFileError
        ``path`` is a FIFO, a device, a socket or a folder (the message names which).
    FileTooLargeError
        ``max_bytes`` is given and the file is larger.
    OSError
        The usual ones: ``FileNotFoundError``, ``PermissionError``, …
    """
    name = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags)
    except IsADirectoryError:
        raise _not_regular(name, "a folder", errno.EISDIR) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(name, describe_file_kind(info.st_mode), errno.EINVAL)
        if max_bytes is not None and info.st_size > max_bytes:
            raise FileTooLargeError(
                f"{os.fsdecode(name)} is {_size_text(info.st_size)}, more than the {_size_text(max_bytes)} accepted"
            )
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: str | os.PathLike, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file (:func:`open_regular_file`), at most ``max_bytes`` of them
    (a file growing while read is cut at ``max_bytes + 1`` and refused)."""
    with open_regular_file(path, max_bytes=max_bytes) as handle:
        data = handle.read() if max_bytes is None else handle.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise FileTooLargeError(f"{os.fsdecode(path)} grew beyond the {_size_text(max_bytes)} accepted while read")
    return data


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_depth(text: str | bytes) -> int:
    """Nesting depth of the arrays and objects of a JSON document (strings ignored), without parsing it."""
    import numpy as np

    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    structure = np.frombuffer(_JSON_STRING.sub(b"", raw), dtype=np.uint8)
    if structure.size == 0:
        return 0
    steps = np.zeros(structure.size, dtype=np.int64)
    steps[(structure == ord("[")) | (structure == ord("{"))] = 1
    steps[(structure == ord("]")) | (structure == ord("}"))] = -1
    return int(np.cumsum(steps).max(initial=0))


def loads_bounded_json(
    text: str | bytes, *, what: str, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """``json.loads(text)`` after checking its length and nesting depth.

    Raises
    ------
    JsonBoundsError
        Longer than ``max_bytes`` or nested deeper than ``max_depth`` (``what`` names the file).
    ValueError
        Not valid JSON (``json.JSONDecodeError``).
    """
    if len(text) > max_bytes:
        raise JsonBoundsError(
            f"{what} is {_size_text(len(text))} of JSON, more than the {_size_text(max_bytes)} accepted"
        )
    depth = json_depth(text)
    if depth > max_depth:
        raise JsonBoundsError(f"{what} nests its JSON {depth} levels deep, more than the {max_depth} accepted")
    return json.loads(text)


def read_format_json(path: str | os.PathLike, format_name: str, *, max_bytes: int) -> dict | None:
    """The JSON object in ``path`` when it is a regular file (not a link) of at most ``max_bytes``,
    valid and bounded JSON (:func:`loads_bounded_json`) whose ``"format"`` is ``format_name``;
    None otherwise — the test of "a file we wrote" before replacing anything beside it."""
    path = Path(path)
    try:
        if path.is_symlink():
            return None
        data = loads_bounded_json(read_regular_bytes(path, max_bytes=max_bytes), what=str(path), max_bytes=max_bytes)
    except (OSError, ValueError):  # (not a regular file, too large, too deep, not JSON)
        return None
    return data if isinstance(data, dict) and data.get("format") == format_name else None


def read_npy_header(handle: BinaryIO, held_bytes: int) -> tuple[tuple[int, ...], bool, Any, int]:
    """``(shape, fortran_order, dtype, header_length)`` of the ``.npy`` stream at ``handle``'s
    position, checked against the ``held_bytes`` the stream holds in all (header included).

    Raises
    ------
    ValueError
        Not a ``.npy`` header, an object dtype, or a data size (shape × item size) that is
        not the bytes held after the header: refused before anything is allocated.
    """
    import numpy as np

    start = handle.tell()
    version = np.lib.format.read_magic(handle)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
    else:
        raise ValueError(f".npy version {version} is not supported")
    header_length = handle.tell() - start
    if dtype.hasobject:
        raise ValueError(f"holds {dtype} values (objects), not numbers")
    announced = math.prod(int(n) for n in shape) * dtype.itemsize
    held = held_bytes - header_length
    if announced != held:
        raise ValueError(
            f"its header announces a {tuple(shape)} {dtype} array of {_size_text(announced)} "
            f"but it holds {_size_text(max(held, 0))} (truncated or tampered)"
        )
    return tuple(shape), bool(fortran), dtype, header_length


def load_npy_checked(handle: BinaryIO, held_bytes: int, *, mmap: bool = False):
    """The array of a ``.npy`` stream whose header matches its bytes (:func:`read_npy_header`):
    memory-mapped read-only (``mmap``; ``handle`` must be a real file) or read into memory."""
    import numpy as np

    start = handle.tell()
    shape, fortran, dtype, header_length = read_npy_header(handle, held_bytes)
    order = "F" if fortran else "C"
    if mmap and math.prod(shape) > 0:
        return np.memmap(handle, dtype=dtype, mode="r", offset=start + header_length, shape=shape, order=order)
    array = np.empty(shape, dtype=dtype, order=order)  # writable, as np.load's; the size was checked
    target = memoryview(array.reshape(-1, order="A").view(np.uint8))
    filled = 0
    while filled < target.nbytes:
        count = handle.readinto(target[filled:])
        if not count:
            raise ValueError(f"ends after {filled} of its {target.nbytes} bytes (truncated)")
        filled += count
    return array


def is_regular_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a regular file (symbolic links followed), without opening it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def check_npz_members(archive: Any, archive_bytes: int, max_members: int | None = None) -> None:
    """Check every member of an open ``zipfile.ZipFile`` of ``archive_bytes`` bytes, from the
    zip directory and the ``.npy`` headers alone: a ``.npy`` name, stored uncompressed
    (every ``.npz`` this project writes is), its stored bytes inside the archive and equal
    to its announced size, and a header announcing exactly those bytes (:func:`read_npy_header`).

    ``max_members``: more members than that are refused before any is read (a file of ours
    never holds that many; 100 000 empty members would otherwise cost a minute of reads).

    Raises
    ------
    ValueError
        The first member that fails, and why (one line); more than ``max_members`` members.
    """
    import zipfile

    members = archive.infolist()
    if max_members is not None and len(members) > max_members:
        raise ValueError(f"{len(members)} members, more than the {max_members} such a file may hold")
    for info in members:
        name = info.filename
        if not name.endswith(".npy"):
            raise ValueError(f"unexpected member {name!r}")
        if info.compress_type != zipfile.ZIP_STORED:
            raise ValueError(f"member {name!r} is compressed (these files are written uncompressed)")
        if info.compress_size != info.file_size or info.header_offset + info.compress_size > archive_bytes:
            raise ValueError(
                f"member {name!r} announces {_size_text(info.file_size)} but the file stores "
                f"{_size_text(min(info.compress_size, archive_bytes))} (truncated or tampered)"
            )
        with archive.open(info) as member:
            try:
                read_npy_header(member, info.file_size)
            except ValueError as exc:
                raise ValueError(f"member {name!r}: {exc}") from None


def _check_member_count(handle: BinaryIO, max_members: int) -> None:
    """Refuse a zip archive whose end-of-central-directory record announces more than
    ``max_members`` members, before the directory is parsed (``zipfile.ZipFile`` would build one
    object per member: 0.5 CPU s for 100 000 of them)."""
    import zipfile

    try:
        end = zipfile._EndRecData(handle)  # (private, stable since Python 2: the record, zip64 included)
        total = None if end is None else int(end[zipfile._ECD_ENTRIES_TOTAL])
    except (AttributeError, IndexError, TypeError, ValueError, OSError):
        return  # (the full check after parsing still applies)
    finally:
        handle.seek(0)
    if total is not None and total > max_members:
        raise ValueError(f"{total} members, more than the {max_members} such a file may hold")


#: Members an ``.npz`` this project reads may hold (a model, a codebook, a shard, a cache entry: each
#: writes a handful to a few hundred).
MAX_NPZ_MEMBERS = 4096


def load_npz_checked(path: str | os.PathLike, keep: Any = None, max_members: int = MAX_NPZ_MEMBERS) -> dict[str, Any]:
    """The arrays of an ``.npz`` file, read into memory after :func:`check_npz_members`
    (a regular file only, no pickle, memory bounded by the file's size); ``keep(name)`` false:
    that member is checked, not read; more than ``max_members`` members are refused first.

    Raises
    ------
    NotRegularFileError, OSError
        Not a regular file, cannot be read.
    ValueError
        Not a zip archive (``zipfile.BadZipFile``) or a member fails the checks.
    """
    import zipfile

    with open_regular_file(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        _check_member_count(handle, max_members)
        with zipfile.ZipFile(handle) as archive:
            check_npz_members(archive, size, max_members)
            arrays = {}
            for info in archive.infolist():
                name = info.filename[: -len(".npy")]
                if keep is None or keep(name):
                    with archive.open(info) as member:
                        arrays[name] = load_npy_checked(member, info.file_size)
    return arrays
