"""Memory-mapped rows stored coded (8- or 4-bit scalar codes), read and written as float32.

The ``npy`` layout keeps float32 and float16 rows as plain memory-mapped arrays.  Rows of a
codec whose stored row is not one float per value (``int8``, ``int4``:
:class:`~classify_images.pipeline.storage.row_codecs.ScalarQuantizedRows`) are wrapped in a
:class:`CodedRows`, which behaves as the ``(n, d)`` float32 array for what the readers and the
builder do with rows: slices stay lazy (nothing is read until rows are taken), an index or an
index array decodes those rows, ``np.asarray`` decodes all of them, and assigning float rows
encodes them into the map.

Packed 8-bit rows (:attr:`~classify_images.pipeline.storage.row_codecs.RowCodec.writes_prefix`)
use the start of their slot only.  Rows assigned are then written with ``pwrite`` into the file
the builder left unallocated, the bytes each row uses and no more: the rest of every slot stays a
hole, so the file takes on disk what its rows hold, and a full disk is an ``OSError`` (ENOSPC)
of that write rather than a fault of a write into the map.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["CodedRows", "stored_array"]


class CodedRows:
    """``(n, n_features)`` float32 rows held coded in ``stored`` (a memory-mapped ``uint8`` array).

    Parameters
    ----------
    stored : ndarray of shape (n, row bytes)
        The stored form, one row per row (``codec.stored_form``).
    codec : RowCodec
        Encodes float32 rows into stored rows and decodes them back, without a learnt state.
    n_features : int
    path : path-like, optional
        The file ``stored`` maps, and ``offset`` the position of its first row there: rows
        assigned are written into the file (the codecs that write a prefix of each slot).
    """

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(
        self, stored: np.ndarray, codec: Any, n_features: int, path: os.PathLike | None = None, offset: int = 0
    ) -> None:
        self.stored, self.codec, self.n_features = stored, codec, int(n_features)
        self.path, self.offset, self._fd = path, int(offset), None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.stored.shape[0], self.n_features)

    def __len__(self) -> int:
        return self.stored.shape[0]

    def _decode(self, stored: np.ndarray) -> np.ndarray:
        out = np.empty((stored.shape[0], self.n_features), dtype=np.float32)
        return self.codec.decode(stored, None, out=out)

    def _decode_rows(self, rows: np.ndarray) -> np.ndarray:
        """The rows ``rows`` (an index array) decoded: in place by a codec that decodes selected
        rows (:meth:`decode_columns`; packed rows: only the bytes they use), else from a copy of
        their stored rows."""
        if not hasattr(self.codec, "decode_columns"):
            return self._decode(self.stored[rows])
        rows = np.arange(len(self))[rows]  # negative indices, masks: checked and made positions
        return self.codec.decode_columns(self.stored, rows, 0, self.n_features, self.n_features)

    def __getitem__(self, key):
        if isinstance(key, tuple):  # rows, then columns of the decoded rows
            return np.asarray(self[key[0]])[(Ellipsis, *key[1:])]
        if isinstance(key, slice):
            return CodedRows(self.stored[key], self.codec, self.n_features)
        if isinstance(key, (int, np.integer)):
            return self._decode_rows(np.array([key]))[0]
        return self._decode_rows(np.asarray(key))

    def __setitem__(self, key, rows) -> None:
        rows = np.asarray(rows, dtype=np.float32)
        encoded = self.codec.encode(rows.reshape(-1, self.n_features), None)
        if not self.codec.writes_prefix:
            self.stored[key] = encoded[0] if rows.ndim == 1 else encoded
            return
        positions = np.arange(len(self))[key].reshape(-1)
        if positions.size != encoded.shape[0]:
            raise ValueError(f"{encoded.shape[0]} rows assigned to {positions.size} rows")
        for position, row, used in zip(positions, encoded, self.codec.used_bytes(encoded, self.n_features)):
            self._write_prefix(int(position), row[:used])

    def _write_prefix(self, position: int, data: np.ndarray) -> None:
        """Write ``data`` at the start of row ``position``'s slot (into the file when known)."""
        if self.path is None:
            self.stored[position, : data.size] = data
            return
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY)
        view, at = memoryview(np.ascontiguousarray(data)), self.offset + position * self.stored.shape[1]
        while view.nbytes:
            written = os.pwrite(self._fd, view, at)
            view, at = view[written:], at + written

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        rows = self._decode(self.stored)
        return rows if dtype is None else rows.astype(dtype, copy=False)

    def flush(self) -> None:
        """Write the stored rows' dirty pages to their file (and close the file rows were written with)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if isinstance(self.stored, np.memmap):
            self.stored.flush()

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)


def stored_array(rows) -> Any:
    """The array holding ``rows`` as stored: the coded array of a :class:`CodedRows`, else ``rows``."""
    return rows.stored if isinstance(rows, CodedRows) else rows
