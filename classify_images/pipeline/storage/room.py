"""Whether a feature set fits where it is going: the bytes its rows need against the free disk.

A build learns its codebook, then encodes every image and writes its row.  The row files are
allocated before the first row is written (:class:`~classify_images.pipeline.storage.feature_store.FeatureSetWriter`),
so a full disk would stop the build there anyway, as an ``ENOSPC`` from the allocation; this
module says so before the encoding starts, in one line giving the bytes needed and the bytes
free, and the lighter choices (:func:`row_bytes`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...coding.product_quantizer import pq_sub_dim
from ...errors import ClassifyImagesError

__all__ = ["NotEnoughRoomError", "row_bytes", "feature_set_bytes", "check_disk_room", "human_bytes"]

#: Bytes kept free beside a feature set (manifest, labels, codebook; the file system's own needs).
DISK_MARGIN = 64 << 20


class NotEnoughRoomError(ClassifyImagesError, OSError):
    """The build's output would not fit the free disk (user-facing, one line)."""


def row_bytes(n_features: int, encoding: str) -> int:
    """Bytes one dense row takes stored as ``encoding`` (``float32``, ``float16``, ``pq8``, ``pq16``)."""
    if encoding == "float32":
        return 4 * n_features
    if encoding == "float16":
        return 2 * n_features
    return -(-n_features // pq_sub_dim(encoding))  # one byte per sub-vector


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


def check_disk_room(out: str | os.PathLike, needed: int, what: str) -> None:
    """Raise :class:`NotEnoughRoomError` unless ``needed`` bytes (plus :data:`DISK_MARGIN`) are free
    on the disk of ``out`` (the nearest existing folder above it); ``what`` names the content."""
    where = _existing_ancestor(Path(out))
    free = shutil.disk_usage(where).free
    if needed + DISK_MARGIN > free:
        raise NotEnoughRoomError(
            f"{out}: {what} needs {human_bytes(needed + DISK_MARGIN)} of disk and {where} has "
            f"{human_bytes(free)} free: free some space, choose another --out, or store lighter rows "
            "(--rows float16, pq8 or pq16)"
        )
