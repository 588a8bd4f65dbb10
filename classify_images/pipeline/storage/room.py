"""Whether a build fits the machine: the bytes its rows need against the free disk, and the
memory its processes need against the available memory.

A build learns its codebook, then encodes every image and writes its row.  The row files are
allocated before the first row is written (:class:`~classify_images.pipeline.storage.feature_store.FeatureSetWriter`),
so a full disk would stop the build there anyway, as an ``ENOSPC`` from the allocation; this
module says so before the encoding starts, in one line giving the bytes needed and the bytes
free, and the lighter choices (:func:`row_bytes`).  Packed ``int8`` rows take what their codes
need, known only once they are encoded (their file is not allocated; a full disk stops the
build at a row's write, one line too): the check asks for the most they can take, one slot
(a byte a value and the header) per row.

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


def check_disk_room(out: str | os.PathLike, needed: int, what: str, *, at_most: bool = False) -> None:
    """Raise :class:`NotEnoughRoomError` unless ``needed`` bytes (plus :data:`DISK_MARGIN`) are free
    on the disk of ``out`` (the nearest existing folder above it); ``what`` names the content,
    ``at_most`` says that ``needed`` is the most it can take."""
    where = _existing_ancestor(Path(out))
    free = shutil.disk_usage(where).free
    if needed + DISK_MARGIN > free:
        raise NotEnoughRoomError(
            f"{out}: {what} needs {'up to ' if at_most else ''}{human_bytes(needed + DISK_MARGIN)} of disk and {where} has "
            f"{human_bytes(free)} free: free some space, choose another --out, or store lighter rows "
            "(--rows int4, pq8 or pq16)"
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
