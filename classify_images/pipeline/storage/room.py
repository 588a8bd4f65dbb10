"""Whether a build fits the machine: the bytes its rows need against the free disk, and the
memory its processes need against the available memory.

A build learns its codebook, then encodes every image and writes its row.  The row files are
allocated before the first row is written (:class:`~classify_images.pipeline.storage.feature_store.FeatureSetWriter`),
so a full disk would stop the build there anyway, as an ``ENOSPC`` from the allocation; this
module says so before the encoding starts, in one line giving the bytes needed and the bytes
free, and the lighter choices (:func:`row_bytes`).  Packed ``int8`` rows take what their codes
need, known only once they are encoded (their file is not allocated): before the encoding the
build is refused only when the disk lacks even :data:`DISK_MARGIN`, and says so when it has less
than the most the rows can take (one slot, a byte a value and the header, per row);
:class:`WrittenRowsWatch` then projects the bytes of all the rows from those written so far
(the blocks the row files occupy) and stops the build in one line, naming both numbers, as
soon as the projection exceeds the free disk.  A full disk that the projection did not foresee
stops the build at a row's write, one line too.

Memory (:func:`build_memory_bytes`): the encoding runs in the building process and ``n_jobs``
workers; each holds the libraries, the codebook and one image's descriptors and statistics
(measured on 15-Scenes Fisher vectors, 262 144 dimensions: 220-255 MB resident per worker,
450-530 MB for the building process, docs/light-pipeline.md), and the building process keeps
at most ``RELEASE_ROWS_EVERY`` written rows resident.  The estimate is compared with the
kernel's ``MemAvailable`` (Linux; elsewhere nothing is checked).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...errors import ClassifyImagesError
from .row_codecs import row_codec

__all__ = [
    "NotEnoughRoomError",
    "row_bytes",
    "feature_set_bytes",
    "build_memory_bytes",
    "check_disk_room",
    "describe_rows",
    "free_disk_bytes",
    "WrittenRowsWatch",
    "check_memory_room",
    "available_memory",
    "human_bytes",
]

#: Resident bytes of one encoding worker beside the rows it returns (measured: 220-255 MB).
WORKER_BYTES = 300 << 20
#: Resident bytes of the building process beside the rows it holds (measured: 450-530 MB).
PARENT_BYTES = 600 << 20

#: Bytes kept free beside a feature set (manifest, labels, codebook; the file system's own needs).
DISK_MARGIN = 64 << 20


class NotEnoughRoomError(ClassifyImagesError, OSError):
    """The build's output would not fit the free disk (user-facing, one line)."""


def row_bytes(n_features: int, encoding: str) -> int:
    """Bytes one dense row takes stored as ``encoding`` (``float32``, ``float16``, ``pq8``, ``pq16``)."""
    return row_codec(encoding).bytes_per_row(n_features)


def feature_set_bytes(n_rows: int, n_features: int, encoding: str, mirrors: bool) -> int:
    """Bytes of a feature set's rows: ``n_rows`` (training + test) rows, twice with their mirrors."""
    return (2 if mirrors else 1) * n_rows * row_bytes(n_features, encoding)


def human_bytes(n: float) -> str:
    """``n`` bytes as ``"4.7 GB"`` (powers of 1000, as ``df -H``)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _existing_ancestor(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


#: What a refusal for lack of disk suggests.
_LIGHTER = "free some space, choose another --out, or store lighter rows (--rows int4, pq8 or pq16)"


def free_disk_bytes(out: str | os.PathLike) -> tuple[Path, int]:
    """``(folder, bytes free)`` for the disk of ``out`` (the nearest existing folder above it)."""
    where = _existing_ancestor(Path(out))
    return where, shutil.disk_usage(where).free


def describe_rows(n_rows: int, n_features: int, encoding: str, mirrors: bool) -> str:
    """How the disk checks name a feature set's rows ("the feature set's 4485 rows and their mirrors
    (262144 dims, int8)")."""
    return f"the feature set's {n_rows} rows{' and their mirrors' if mirrors else ''} ({n_features} dims, {encoding})"


def check_disk_room(out: str | os.PathLike, needed: int, what: str, *, at_most: bool = False) -> str | None:
    """Raise :class:`NotEnoughRoomError` unless ``needed`` bytes (plus :data:`DISK_MARGIN`) are free
    on the disk of ``out`` (the nearest existing folder above it); ``what`` names the content.

    ``at_most``: ``needed`` is the most the content can take, its bytes known only as it is written
    (watched then by :class:`WrittenRowsWatch`): refused only when not even :data:`DISK_MARGIN` is
    free, and the returned warning says so when less than ``needed`` is.  Otherwise None."""
    where, free = free_disk_bytes(out)
    if (0 if at_most else needed) + DISK_MARGIN > free:
        raise NotEnoughRoomError(
            f"{out}: {what} needs {'at least ' if at_most else ''}{human_bytes((0 if at_most else needed) + DISK_MARGIN)} "
            f"of disk and {where} has {human_bytes(free)} free: {_LIGHTER}"
        )
    if needed + DISK_MARGIN > free:
        return (
            f"{what} take up to {human_bytes(needed)} of disk, with {human_bytes(DISK_MARGIN)} to spare, and {where} "
            f"has {human_bytes(free)} free; packed codes usually take less: the disk is checked again as the rows "
            "are written"
        )
    return None


def _allocated_bytes(path: str | os.PathLike) -> int:
    """Bytes of disk a file occupies (its blocks: a sparse file's holes take none); its size
    where the file system does not report blocks."""
    stat = os.stat(path)
    blocks = getattr(stat, "st_blocks", None)
    return stat.st_size if blocks is None else 512 * blocks


class WrittenRowsWatch:
    """Stops a build whose rows, at the bytes a row the rows written so far take, would not fit
    the free disk: for row files whose size is known only as they are written (packed 8-bit
    codes, each row the prefix of an unallocated slot).

    :meth:`check` projects the disk the ``n_rows`` rows will take from the blocks the ``paths``
    occupy after ``rows_written`` of them, linearly, and raises :class:`NotEnoughRoomError` when
    the rest (plus :data:`DISK_MARGIN`) exceeds the free disk.  The projection assumes that the
    rows still to come are like those written (a build writes its rows class by class: checked
    again as it goes, the projection follows the classes met so far).

    Parameters
    ----------
    out : path
        The feature set being written (named by the error).
    paths : sequence of paths
        The row files.
    n_rows : int
        Rows the files will hold in all.
    n_features : int
        Values a row (for the bits a value the error states).
    what : str
        The content, as :func:`check_disk_room` names it.
    """

    def __init__(self, out: str | os.PathLike, paths, n_rows: int, n_features: int, what: str) -> None:
        self.out, self.paths, self.n_rows, self.n_features, self.what = out, list(paths), n_rows, n_features, what

    def check(self, rows_written: int) -> None:
        """Raise :class:`NotEnoughRoomError` if the rows, projected from the first ``rows_written``,
        need more disk than is free."""
        if rows_written <= 0 or not self.paths:
            return
        written = sum(_allocated_bytes(path) for path in self.paths)
        projected = written * self.n_rows / rows_written
        where, free = free_disk_bytes(self.out)
        if projected - written + DISK_MARGIN > free:
            bits = 8 * written / max(rows_written * self.n_features, 1)
            raise NotEnoughRoomError(
                f"{self.out}: {self.what} need about {human_bytes(projected)} of disk at the {bits:.1f} bits a "
                f"value of the first {rows_written} rows: {human_bytes(projected - written)} more and "
                f"{human_bytes(DISK_MARGIN)} to spare, and {where} has {human_bytes(free)} free: {_LIGHTER}"
            )


def build_memory_bytes(n_jobs: int, n_features: int, rows_held: int) -> int:
    """Memory a build needs: the building process, ``n_jobs`` workers, and ``rows_held`` float32
    rows of ``n_features`` in flight (the rows written and not yet released, one per worker)."""
    return PARENT_BYTES + max(n_jobs, 1) * WORKER_BYTES + (rows_held + max(n_jobs, 1)) * 4 * n_features


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or None where there is none."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory_room(needed: int, what: str) -> None:
    """Raise :class:`NotEnoughRoomError` when ``needed`` bytes exceed the available memory."""
    available = available_memory()
    if available is not None and needed > available:
        raise NotEnoughRoomError(
            f"{what} needs about {human_bytes(needed)} of memory and {human_bytes(available)} is "
            "available: close other programs or use fewer workers (--n-jobs)"
        )
